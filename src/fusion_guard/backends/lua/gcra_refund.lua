-- Give back what an admitted gcra.lua decision took from some budgets. On a Redis Cluster a
-- decision over budgets in several slots is decided slot by slot (one script per slot); when a
-- later slot refuses, the budgets an earlier slot admitted are given back here, so a refusal
-- still spends no limit's budget (see RedisRateLimitBackend.decide).
--
-- KEYS[i]   budget i's TAT (see gcra.lua), all in one slot; promise cursors are not touched
-- ARGV[i]   emission interval of budget i, microseconds: what the admission added
--
-- The TAT moves back one interval (calls admitted since moved it further on: it is still one
-- interval ahead of what they took); a TAT back in the past is deleted (the budget is full).
-- Reply: 0.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

for i = 1, #KEYS do
    local tat = tonumber(redis.call('GET', KEYS[i]))
    if tat then
        tat = tat - tonumber(ARGV[i])
        if tat > now then
            redis.call('SET', KEYS[i], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000))
        else
            redis.call('DEL', KEYS[i])
        end
    end
end
return 0
