-- Extend the leases of one process's running calls on one semaphore, on the server's clock.
--
-- KEYS[1]      sorted set of the holders (see lease_acquire.lua)
-- ARGV[1]      limit
-- ARGV[2]      lease, milliseconds
-- ARGV[3...]   holder ids
--
-- A holder that is missing (its lease ran out, or Redis restarted empty) is added back while the
-- limit allows, so the count stays truthful without ever exceeding the limit.
-- Reply: {refreshed, lost}: how many leases now run to now + lease, how many could not be kept.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local limit = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local expiry = string.format('%.0f', now + lease)

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local holders = redis.call('ZCARD', KEYS[1])
local refreshed, lost = 0, 0

for i = 3, #ARGV do
    if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
        redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i])
        refreshed = refreshed + 1
    elseif holders < limit then
        redis.call('ZADD', KEYS[1], expiry, ARGV[i])
        holders = holders + 1
        refreshed = refreshed + 1
    else
        lost = lost + 1
    end
end

if refreshed > 0 then
    redis.call('PEXPIRE', KEYS[1], lease)
end
return {refreshed, lost}
