-- Release leases of a fleet-wide semaphore: one call's, or a batch a replica could not release
-- (or whose acquire it gave up on) while Redis failed.
--
-- KEYS[1]      sorted set of the holders (see lease_acquire.lua)
-- KEYS[2]      sorted set of released holder ids, scored by when they may be forgotten
-- ARGV[1]      how long to remember the ids as released, milliseconds (0: not at all)
-- ARGV[2...]   holder ids
--
-- A remembered id cannot get its lease back from a request sent earlier but run only now (an
-- acquire that timed out on the client, or a refresh restoring leases, delayed in a stalled
-- Redis). A release with nothing such in flight forgets at once: it costs only the ZREM.
-- Reply: how many of the ids held a lease (the others had expired, or were never granted).

local remember = tonumber(ARGV[1])
local removed = 0
if remember == 0 then
    for i = 2, #ARGV do
        removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
    end
    return removed
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local forget_at = string.format('%.0f', now + remember)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
for i = 2, #ARGV do
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
    redis.call('ZADD', KEYS[2], forget_at, ARGV[i])
end
redis.call('PEXPIRE', KEYS[2], remember)
return removed
