-- Acquire one lease of a fleet-wide semaphore, on the server's clock (TIME).
--
-- KEYS[1]   sorted set of the holders, each scored by its lease expiry, integer milliseconds
-- ARGV[1]   holder id (unique per call and process)
-- ARGV[2]   limit: how many holders may exist at once
-- ARGV[3]   lease, milliseconds: a holder not refreshed within it is gone (a crashed process)
--
-- Expired holders are purged first, so a crashed process's permits come back within the lease.
-- Reply: {1, holders} when acquired (re-acquiring a held id only refreshes it), or
--        {0, holders} when the fleet is full.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease = tonumber(ARGV[3])
local expiry = string.format('%.0f', now + lease)

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local holders = redis.call('ZCARD', KEYS[1])
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])

if held or holders < tonumber(ARGV[2]) then
    redis.call('ZADD', KEYS[1], expiry, ARGV[1])
    -- Every lease ends by now + lease, so the whole set can go then (idle keys vanish).
    redis.call('PEXPIRE', KEYS[1], lease)
    if held then
        return {1, holders}
    end
    return {1, holders + 1}
end

return {0, holders}
