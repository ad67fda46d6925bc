-- Release one lease of a fleet-wide semaphore.
--
-- KEYS[1]   sorted set of the holders (see lease_acquire.lua)
-- ARGV[1]   holder id
--
-- Reply: 1 when the holder was present, 0 when its lease had already expired.

return redis.call('ZREM', KEYS[1], ARGV[1])
