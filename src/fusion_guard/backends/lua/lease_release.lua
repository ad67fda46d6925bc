-- Release leases of a fleet-wide semaphore: one call's, or a batch a replica could not release
-- (or whose acquire it gave up on) while Redis failed.
--
-- KEYS[1]      sorted set of the holders (see lease_acquire.lua)
-- KEYS[2]      sorted set of released holder ids, scored by when they may be forgotten
-- ARGV[1]      lease, milliseconds
-- ARGV[2...]   holder ids
--
-- Each id is remembered as released for one lease, so that a request sent earlier but run only
-- now (an acquire that timed out on the client, a refresh delayed by a stalled Redis) cannot
-- bring its lease back.
-- Reply: how many of the ids held a lease (the others had expired, or were never granted).

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease = tonumber(ARGV[1])
local forget_at = string.format('%.0f', now + lease)

redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local removed = 0
for i = 2, #ARGV do
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
    redis.call('ZADD', KEYS[2], forget_at, ARGV[i])
end
redis.call('PEXPIRE', KEYS[2], lease)
return removed
