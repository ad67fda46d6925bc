-- Extend the leases of one process's running calls on one semaphore, on the server's clock.
--
-- KEYS[1]      sorted set of the holders (see lease_acquire.lua)
-- KEYS[2]      sorted set of released holder ids (see lease_release.lua)
-- KEYS[3]      the fleet's record (see lease_acquire.lua)
-- ARGV[1]      lease, milliseconds
-- ARGV[2]      grace, milliseconds (see lease_acquire.lua)
-- ARGV[3]      '1' to restore missing holders, '0' to only extend those present
-- ARGV[4...]   holder ids, each of a call still running
--
-- A missing holder (Redis restarted empty, or its lease ran out while Redis stalled) is restored,
-- when asked, even beyond the limit: its call is running, so it counts, and the fleet refuses
-- newcomers until enough calls end. A released id is never restored (this request may be an old
-- one, delayed). The periodic refresh only extends, so a delayed one can never bring a lease
-- back; it reports the missing, and the replica then asks for a restore. Without a record,
-- Redis lost its data: the record is made with the grace, during which no new lease is granted,
-- so every replica can restore its running calls' leases first.
-- Reply: {refreshed, missing}: leases now running to now + lease, and how many were missing
-- (restored, when asked).

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease = tonumber(ARGV[1])
local expiry = string.format('%.0f', now + lease)
local restore = ARGV[3] == '1'

if not redis.call('GET', KEYS[3]) then
    redis.call('SET', KEYS[3], string.format('%.0f', now + tonumber(ARGV[2])))
end

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local refreshed, missing = 0, 0
for i = 4, #ARGV do
    if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
        redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i])
        refreshed = refreshed + 1
    elseif not redis.call('ZSCORE', KEYS[2], ARGV[i]) then
        missing = missing + 1
        if restore then
            redis.call('ZADD', KEYS[1], expiry, ARGV[i])
            refreshed = refreshed + 1
        end
    end
end

if refreshed > 0 then
    redis.call('PEXPIRE', KEYS[1], lease)
end
return {refreshed, missing}
