-- Acquire one lease of a fleet-wide semaphore, on the server's clock (TIME).
--
-- KEYS[1]   sorted set of the holders, each scored by its lease expiry, integer milliseconds
-- KEYS[2]   sorted set of released holder ids, scored by when they may be forgotten
-- KEYS[3]   the fleet's record: until when (milliseconds) new leases wait after a data loss
-- ARGV[1]   holder id (unique per call and process)
-- ARGV[2]   limit: how many holders may exist at once
-- ARGV[3]   lease, milliseconds: a holder not refreshed within it is gone (a crashed process)
-- ARGV[4]   '1' when the calling replica has used this semaphore before, else '0'
-- ARGV[5]   grace, milliseconds: how long new leases wait after Redis lost the holders
--
-- Expired holders are purged first, so a crashed process's permits come back within the lease.
-- A released id is never granted: the caller gave up on this acquire (it timed out on the
-- client, or was cancelled) and released it, and the request only arrived now (Redis stalled).
-- No record while the replica knows the semaphore means Redis lost its data (a restart, a
-- flush): calls may still be running on leases that are gone, so new leases wait `grace` for
-- their replicas to register them again (lease_refresh.lua) before counting free slots.
-- Reply: {granted, holders, recovering}: granted is 1 when acquired (re-acquiring a held id only
-- refreshes it), 0 when the fleet is full or recovering; recovering is 1 while leases wait.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease = tonumber(ARGV[3])

local ready = redis.call('GET', KEYS[3])
if not ready then
    ready = now
    if ARGV[4] == '1' then
        ready = now + tonumber(ARGV[5])
    end
    redis.call('SET', KEYS[3], string.format('%.0f', ready))
end

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local holders = redis.call('ZCARD', KEYS[1])
if now < tonumber(ready) then
    return {0, holders, 1}
end
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
    return {0, holders, 0}
end

local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
if held or holders < tonumber(ARGV[2]) then
    redis.call('ZADD', KEYS[1], string.format('%.0f', now + lease), ARGV[1])
    -- Every lease ends by now + lease, so the whole set can go then (idle keys vanish).
    redis.call('PEXPIRE', KEYS[1], lease)
    if held then
        return {1, holders, 0}
    end
    return {1, holders + 1, 0}
end

return {0, holders, 0}
