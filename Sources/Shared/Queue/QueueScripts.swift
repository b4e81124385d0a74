/// The queue's Lua scripts. Each runs atomically, so a job is always in exactly one place.
///
/// They are compiled into the binary rather than shipped as resource files, so a worker copied to
/// `/usr/local/bin` alone cannot start without them.
///
/// **Redis at `maxmemory` (with `noeviction`).** A script may write only if its first write cannot grow
/// memory (`HDEL`, `ZREM`, `XACK`, …): Redis refuses a script whose first write is `HSET`, `ZADD`, `XADD`
/// or `SET` while it is full, and lets one go on once it has written. So the workers' scripts (start,
/// finish, retry, dead-letter, promote, restore) write something that frees first: finishing jobs is what
/// frees room (a final job forgets its receipt), and must go on while the API refuses submissions with 503.
/// `enqueue` writes `XADD` first, so a submission is refused whole.
enum QueueScripts {
    /// A transaction's claim names its customer and how many of their unfinished jobs hold it: `<customer>`
    /// for one, `<customer>\n<n>` for n (one purchase submitted for several offers), `<customer>\ngranted`
    /// once granted. `holders` reads a claim for a customer: n, 0 when granted to them, nil when another
    /// customer's. `holding` writes n holders. `release` drops one holder and the claim with its last.
    private static let claimFunctions = """
        local function holders(value, customer)
          if value == customer then return 1 end
          local prefix = customer .. '\\n'
          if string.sub(value, 1, #prefix) ~= prefix then return nil end
          local rest = string.sub(value, #prefix + 1)
          if rest == 'granted' then return 0 end
          return tonumber(rest)
        end
        local function holding(customer, n)
          if n == 1 then return customer end
          return customer .. '\\n' .. n
        end
        local function release(claim, customer)
          local value = redis.call('GET', claim)
          local n = value and holders(value, customer)
          if not n or n == 0 then return end
          if n == 1 then redis.call('DEL', claim) else redis.call('SET', claim, holding(customer, n - 1), 'KEEPTTL') end
        end

        """

    /// Whether a final record is this run's (1) or the job was final already (-1), for the workers' counts: a job is
    /// counted once however many copies of it end. A run is its entry and the consumer holding it; the job's
    /// `finishedBy` names the run that made it final, so the same run's record sent again (its answer lost) is
    /// still its own, and a peer that claimed the entry meanwhile is another run. A job whose status is gone
    /// (expired, deleted) counts, as before: no other run is known to have counted it.
    private static let finishedFunction = """
        local function finished(job, current, settled, run)
          if not current or not settled then return 1 end
          if run and redis.call('HGET', job, 'finishedBy') == run then return 1 end
          return -1
        end

        """

    /// Whether a copy of a job working on `entry` is stale: the job is not final and runs on another entry by
    /// now (promoted, put back or requeued since). Jobs stored before they kept their entry count as current.
    private static let staleFunction = """
        local function stale(job, status, entry)
          if not status or status == 'granted' or status == 'rejected' or status == 'failed' then return false end
          local current = redis.call('HGET', job, 'entry')
          return current and current ~= entry
        end

        """

    /// Deduplicate, check the claim, write the status, add to the stream — or nothing at all — for each
    /// submission of a batch, in order (a later submission sees what an earlier one stored).
    ///
    /// A transaction's claim (see `claimFunctions`) refuses other customers. A job that finds it free, or
    /// held by its customer's unfinished jobs, holds it too and records so (`claimed` 1), refreshing its
    /// lifetime; one that finds it granted to its customer leaves it as it is.
    ///
    /// KEYS: stream, inflight, then per submission: dedup, job, pending, and claim when it has a
    /// transaction id. ARGV: job key prefix, access channel, then per submission: jobId, customer, offer,
    /// publisherId, payload, now (ms), key TTL (s), has claim ('1' or '0'). Returns one reply per
    /// submission: 'created' | {'duplicate', jobId, status} | {'claimed'} | {'error', message} (a key of that
    /// submission holds another type; what it wrote before stays, as when it is sent alone). A new job's hash
    /// has no `attempts` (0 until `start` counts one) and no `updatedAt` (its `acceptedAt` until a script
    /// changes it): the fewer fields each receipt writes, the less Redis and its AOF carry per accept.
    ///
    /// Every script that changes what a customer's access status answers (`pending`, or a grant behind a
    /// final status) publishes the pending key on the access channel, so API caches drop that answer.
    static let enqueue = RedisScript(name: "enqueue", source: claimFunctions + """
        local function submit(dedup, job, pending, claim, a)
          local existing = redis.call('GET', dedup)
          if existing then
            local status = redis.call('HGET', ARGV[1] .. existing, 'status')
            if status then return {'duplicate', existing, status} end
          end
          local owner, held = nil, 0
          if claim then
            owner = redis.call('GET', claim)
            if owner then
              held = holders(owner, ARGV[a + 1])
              if not held then return {'claimed'} end
            end
          end
          local holds = claim and (not owner or held > 0)
          local entry = redis.call('XADD', KEYS[1], '*', 'job', ARGV[a])
          redis.call('HSET', job, 'status', 'queued', 'customerEmail', ARGV[a + 1], 'offerId', ARGV[a + 2],
            'publisherId', ARGV[a + 3], 'payload', ARGV[a + 4], 'acceptedAt', ARGV[a + 5], 'entry', entry, 'claimed', holds and 1 or 0)
          redis.call('ZADD', KEYS[2], ARGV[a + 5], ARGV[a])
          redis.call('SET', dedup, ARGV[a], 'EX', ARGV[a + 6])
          redis.call('SADD', pending, ARGV[a])
          redis.call('EXPIRE', pending, ARGV[a + 6])
          if holds then redis.call('SET', claim, holding(ARGV[a + 1], held + 1), 'EX', ARGV[a + 6]) end
          redis.call('PUBLISH', ARGV[2], pending)
          return 'created'
        end
        local replies = {}
        local k = 3
        for a = 3, #ARGV, 8 do
          local claim = nil
          if ARGV[a + 7] == '1' then claim = KEYS[k + 3] end
          local ok, reply = pcall(submit, KEYS[k], KEYS[k + 1], KEYS[k + 2], claim, a)
          if not ok then
            -- One submission's own key of the wrong type is its own failure; anything else (OOM, READONLY,
            -- NOPERM, …) is the server's, and fails the call with Redis' own error (error() would wrap it).
            local message = type(reply) == 'table' and reply.err or tostring(reply)
            if string.sub(message, 1, 9) ~= 'WRONGTYPE' then return redis.error_reply(message) end
            reply = {'error', message}
          end
          replies[#replies + 1] = reply
          k = k + (claim and 4 or 3)
        end
        return replies
        """)

    /// Mark a delivered job `processing` and count the attempt; report final or vanished jobs instead.
    ///
    /// KEYS: job, inflight. ARGV: now (ms), most starts allowed, jobId. Returns {'ready', attempts, payload, acceptedAt,
    /// started before ('1' or '0': not `queued`)} | {'poison', attempts, payload, acceptedAt, started before} |
    /// {'final', status} | {'missing'}. A job started more often
    /// than attempts allow never finished its earlier starts (it crashed or stalled its workers): poison.
    /// `acceptedAt` restarts when an operator requeues, so the age limit counts from the requeue.
    static let start = RedisScript(name: "start", source: """
        local status = redis.call('HGET', KEYS[1], 'status')
        if not status then return {'missing'} end
        if status == 'granted' or status == 'rejected' or status == 'failed' then return {'final', status} end
        local payload = redis.call('HGET', KEYS[1], 'payload')
        if not payload then return {'missing'} end
        redis.call('HDEL', KEYS[1], 'nextAttemptAt', 'reason')
        local attempts = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
        redis.call('HSET', KEYS[1], 'status', 'processing', 'updatedAt', ARGV[1])
        redis.call('ZADD', KEYS[2], ARGV[1], ARGV[3])
        local verdict = 'ready'
        if attempts > tonumber(ARGV[2]) then verdict = 'poison' end
        return {verdict, attempts, payload, redis.call('HGET', KEYS[1], 'acceptedAt'), status == 'queued' and '0' or '1'}
        """)

    /// Rebuild a job's hash as the compact listpack it was before its receipt came. A value longer than Redis'
    /// `hash-max-listpack-value` (64 bytes by default) makes a hash a hash table, and Redis never converts one
    /// back, so a final status would otherwise keep the receipt's table for the whole retention: 432 bytes
    /// rebuilt against 961 for a granted job (`MEMORY USAGE`). The status' part of `finish` then costs Redis
    /// about 7 µs more and appends about 500 bytes more to the AOF and to replicas, the `DEL` and the `HSET` of
    /// every field (50,000 calls pipelined: 14.5–15.0 against 8.0 µs of Redis' CPU each, 933 against 424 bytes).
    /// One `HSET` carrying the final fields, instead of following theirs, saved 340 of those bytes and under
    /// 1 µs: not worth a second way of writing them. A hash that would not fit Redis' default limits (128
    /// entries, 64 bytes: a long email or consumer name) is left as it is, as a rebuild would not shrink it.
    /// Everything is checked before the `DEL`, so the rebuild is whole or not at all. Its lifetime goes with
    /// it: callers set it after.
    private static let compactFunction = """
        local function compact(key)
          local fields = redis.call('HGETALL', key)
          if #fields > 256 then return end
          for i = 1, #fields do
            if #fields[i] > 64 then return end
          end
          redis.call('DEL', key)
          redis.call('HSET', key, unpack(fields))
        end

        """

    /// Record a final outcome (granted or rejected), forget the receipt (and rebuild the status compact: see
    /// `compactFunction`), acknowledge and trim the entry.
    /// A final status is never overwritten by a late copy of the same job, except that a grant (the
    /// truth in PostgreSQL) replaces a rejection or a dead letter that a concurrent copy recorded.
    ///
    /// A job that ends without a grant lets go of its transaction's claim when it holds it; the last
    /// holder's going frees it (unless it was granted meanwhile): the transaction is then neither queued
    /// nor granted, so another customer may submit it.
    ///
    /// A grant marks the job's claim and the transactions it claimed as granted to the customer
    /// (`<customer>\ngranted`) for the retention, whatever claimed them in Redis before (PostgreSQL
    /// granted them to this customer), whether or not the job was submitted with their ids: another
    /// customer's submission of any of them is refused at once, and no ending of another job frees them.
    ///
    /// A job parked in the retry set (by another copy of it) leaves the set: it is final.
    ///
    /// A rejection from a stalled copy whose job runs on another entry by now (promoted, put back or requeued
    /// since) only acknowledges its entry (`stale`): the job's current run decides. Else a late copy would
    /// undo an operator's requeue.
    ///
    /// KEYS: job, stream, pending, dead, inflight, retry, the job's claim when it has a transaction id, then the
    /// claims a grant takes. ARGV: entry id, group, status, reason, environment, expiresAt, now, retention (s),
    /// jobId, access channel, customer, whether KEYS[7] is the job's claim ('1' or '0'), consumer.
    /// Empty strings mean "not set". Returns 1 when this run's outcome is the job's (``finishedFunction``), 0 when
    /// stale, -1 when the job was final already (only acknowledged).
    static let finish = RedisScript(name: "finish", source: claimFunctions + staleFunction + finishedFunction + compactFunction + """
        redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
        redis.call('XDEL', KEYS[2], ARGV[1])
        local current = redis.call('HGET', KEYS[1], 'status')
        if ARGV[3] ~= 'granted' and stale(KEYS[1], current, ARGV[1]) then return 0 end
        local settled = current == 'granted' or ((current == 'rejected' or current == 'failed') and ARGV[3] ~= 'granted')
        local run = ARGV[1] .. '\\n' .. ARGV[13]
        local recorded = finished(KEYS[1], current, settled, run)
        if current and not settled then
          local dead = redis.call('HGET', KEYS[1], 'deadEntry')
          if dead then
            redis.call('XDEL', KEYS[4], dead)
            redis.call('HDEL', KEYS[1], 'deadEntry')
          end
          redis.call('HSET', KEYS[1], 'status', ARGV[3], 'updatedAt', ARGV[7], 'finishedBy', run)
          if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'reason', ARGV[4]) else redis.call('HDEL', KEYS[1], 'reason') end
          if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'environment', ARGV[5]) end
          if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'expiresAt', ARGV[6]) else redis.call('HDEL', KEYS[1], 'expiresAt') end
          local wasTable = redis.call('HSTRLEN', KEYS[1], 'payload') > 64
          redis.call('HDEL', KEYS[1], 'payload', 'nextAttemptAt')
          if wasTable then compact(KEYS[1]) end
          redis.call('EXPIRE', KEYS[1], ARGV[8])
          if ARGV[12] == '1' and ARGV[3] ~= 'granted' and redis.call('HGET', KEYS[1], 'claimed') == '1' then release(KEYS[7], ARGV[11]) end
        end
        if ARGV[3] == 'granted' then
          for k = 7, #KEYS do redis.call('SET', KEYS[k], ARGV[11] .. '\\ngranted', 'EX', ARGV[8]) end
        end
        redis.call('SREM', KEYS[3], ARGV[9])
        redis.call('ZREM', KEYS[5], ARGV[9])
        redis.call('ZREM', KEYS[6], ARGV[9])
        redis.call('PUBLISH', ARGV[10], KEYS[3])
        return recorded
        """)

    /// Park a job in the delayed-retry set and acknowledge its entry, in one step; a job already final
    /// (a late copy of it) is only acknowledged. With a counter and a limit, the attempts that ended this
    /// way are counted in the job's hash, and the one that reaches the limit parks nothing and returns 0:
    /// the caller ends the job. From the second such attempt on, the job is due no sooner than the
    /// repeat due time. An attempt that did not count (cut off by a shutdown) is taken back from `attempts`.
    ///
    /// Only the consumer that holds the entry parks it: a worker that stalled past the claim idle time, whose
    /// entry a peer claimed meanwhile (or already finished or parked), changes nothing and gets -2. Else its
    /// late retry would read `retrying` over the peer's run and put a third copy of the job on the stream.
    ///
    /// KEYS: job, stream, retry, inflight. ARGV: entry id, group, jobId, due (ms), reason, now, whether the
    /// attempt counts ('1' or '0'), consumer, and optionally counter field, limit and repeat due (ms). Returns
    /// the due time (parked) | -1 (limit reached) | -2 (not held) | -3 (final already: only acknowledged).
    static let retry = RedisScript(name: "retry", source: """
        if #redis.call('XPENDING', KEYS[2], ARGV[2], ARGV[1], ARGV[1], 1, ARGV[8]) == 0 then return -2 end
        local due = ARGV[4]
        local current = redis.call('HGET', KEYS[1], 'status')
        local parking = current and current ~= 'granted' and current ~= 'rejected' and current ~= 'failed'
        local count = nil
        if parking and ARGV[9] then
          count = (tonumber(redis.call('HGET', KEYS[1], ARGV[9])) or 0) + 1
          if count >= tonumber(ARGV[10]) then return -1 end
          if count >= 2 and tonumber(ARGV[11]) > tonumber(due) then due = ARGV[11] end
        end
        redis.call('ZREM', KEYS[4], ARGV[3])
        redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
        redis.call('XDEL', KEYS[2], ARGV[1])
        if parking then
          if count then redis.call('HSET', KEYS[1], ARGV[9], count) end
          if ARGV[7] == '0' and (tonumber(redis.call('HGET', KEYS[1], 'attempts')) or 0) > 0 then
            redis.call('HINCRBY', KEYS[1], 'attempts', -1)
          end
          redis.call('HSET', KEYS[1], 'status', 'retrying', 'reason', ARGV[5], 'nextAttemptAt', due, 'updatedAt', ARGV[6])
          redis.call('ZADD', KEYS[3], due, ARGV[3])
          return tonumber(due)
        end
        return -3
        """)

    /// Count receipts that Apple verified, in the stretch of time they were verified in; stretches older
    /// than the oldest kept leave the count once it holds more than the most kept.
    ///
    /// KEYS: apple verifications (environment). ARGV: stretch, count, oldest stretch kept, lifetime (ms), most kept.
    static let appleVerified = RedisScript(name: "apple-verified", source: """
        redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
        redis.call('PEXPIRE', KEYS[1], ARGV[4])
        if redis.call('HLEN', KEYS[1]) > tonumber(ARGV[5]) then
          local oldest = tonumber(ARGV[3])
          for _, stretch in ipairs(redis.call('HKEYS', KEYS[1])) do
            if (tonumber(stretch) or 0) < oldest then redis.call('HDEL', KEYS[1], stretch) end
          end
        end
        return 1
        """)

    /// Note a 21002 answer for a job, and tell what the workers saw of that environment lately: how many
    /// receipts it verified, and how many other jobs got 21002 (the job's own earlier ones do not count).
    /// A stretch of verifications counts when any of it lies within the window.
    ///
    /// KEYS: apple verifications (environment), apple malformed (environment). ARGV: jobId, now (ms), window (ms),
    /// length of a stretch (ms).
    static let appleMalformed = RedisScript(name: "apple-malformed", source: """
        local now = tonumber(ARGV[2])
        local window = tonumber(ARGV[3])
        local length = tonumber(ARGV[4])
        redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - window))
        redis.call('ZADD', KEYS[2], now, ARGV[1])
        redis.call('PEXPIRE', KEYS[2], window)
        local verified = 0
        local counts = redis.call('HGETALL', KEYS[1])
        for i = 1, #counts, 2 do
          if ((tonumber(counts[i]) or 0) + 1) * length > now - window then verified = verified + (tonumber(counts[i + 1]) or 0) end
        end
        return {verified, redis.call('ZCARD', KEYS[2]) - 1}
        """)

    /// Move due retries back to the stream; each id leaves the set once, so none moves twice. A job that is
    /// final by now (another copy of it ended it) only leaves the set.
    ///
    /// KEYS: retry, stream, inflight. ARGV: now (ms), limit, job key prefix.
    static let promote = RedisScript(name: "promote", source: """
        local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
        for _, id in ipairs(due) do
          redis.call('ZREM', KEYS[1], id)
          local status = redis.call('HGET', ARGV[3] .. id, 'status')
          if status and status ~= 'granted' and status ~= 'rejected' and status ~= 'failed' then
            local entry = redis.call('XADD', KEYS[2], '*', 'job', id)
            redis.call('HSET', ARGV[3] .. id, 'entry', entry)
            redis.call('ZADD', KEYS[3], ARGV[1], id)
          end
        end
        return #due
        """)

    /// Dead-letter a job: status `failed`, an entry in the dead-letter stream, entry acknowledged, its claim
    /// given up as in `finish` (only when this job took it); a job already final is only acknowledged. Entries older than the retention
    /// leave the dead-letter stream (their jobs' statuses have expired, so they could not be requeued).
    ///
    /// A stalled copy whose job runs on another entry by now only acknowledges its entry, as in `finish`.
    ///
    /// KEYS: job, stream, dead, pending, inflight, retry, and claim when the job has a transaction id. ARGV: entry id
    /// (empty for a job parked in the retry set), group, jobId, reason, detail, now, retention (s), access channel,
    /// customer, consumer. Returns 1 when this run's outcome is the job's, 0 when stale, -1 when the job was final
    /// already, as `finish` does.
    static let deadLetter = RedisScript(name: "dead-letter", source: claimFunctions + staleFunction + finishedFunction + """
        if ARGV[1] ~= '' and stale(KEYS[1], redis.call('HGET', KEYS[1], 'status'), ARGV[1]) then
          redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
          redis.call('XDEL', KEYS[2], ARGV[1])
          return 0
        end
        redis.call('SREM', KEYS[4], ARGV[3])
        redis.call('ZREM', KEYS[5], ARGV[3])
        redis.call('ZREM', KEYS[6], ARGV[3])
        local current = redis.call('HGET', KEYS[1], 'status')
        local settled = current == 'granted' or current == 'rejected' or current == 'failed'
        local run = ARGV[1] ~= '' and (ARGV[1] .. '\\n' .. ARGV[10]) or nil
        local recorded = finished(KEYS[1], current, settled, run)
        if current and not settled then
          local oldest = tostring(math.max(0, tonumber(ARGV[6]) - tonumber(ARGV[7]) * 1000))
          local entry = redis.call('XADD', KEYS[3], 'MINID', oldest, '*', 'job', ARGV[3], 'reason', ARGV[4], 'detail', ARGV[5], 'at', ARGV[6])
          redis.call('HSET', KEYS[1], 'status', 'failed', 'reason', ARGV[4], 'updatedAt', ARGV[6], 'deadEntry', entry)
          if run then redis.call('HSET', KEYS[1], 'finishedBy', run) else redis.call('HDEL', KEYS[1], 'finishedBy') end
          redis.call('HDEL', KEYS[1], 'nextAttemptAt')
          redis.call('EXPIRE', KEYS[1], ARGV[7])
          if KEYS[7] and redis.call('HGET', KEYS[1], 'claimed') == '1' then
            release(KEYS[7], ARGV[9])
            redis.call('HSET', KEYS[1], 'claimed', 0)
          end
        end
        redis.call('PUBLISH', ARGV[8], KEYS[4])
        if ARGV[1] ~= '' then
          redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
          redis.call('XDEL', KEYS[2], ARGV[1])
        end
        return recorded
        """)

    /// Put a failed job back on the stream with fresh attempts (the per-answer counts of `retry` too); a
    /// second call finds it no longer failed. The submission's dedup key and its transaction's claim (given
    /// up when the job failed) are taken again for another key TTL, unless they name another job or customer
    /// by now: the requeued job is again what the API answers for them. A claim other unfinished jobs of
    /// the customer hold, it holds with them; one granted to the customer is left as it is. A job dead-lettered
    /// by its record (its claim key unknown then) never gave its hold up, and keeps it as one.
    ///
    /// It leaves the retry set, where a copy of it may still be parked: else the promoter would put it on the
    /// stream a second time.
    ///
    /// KEYS: job, stream, dead, pending, inflight, retry, and, when the payload can be read, dedup and claim (when
    /// the job has a transaction id). ARGV: jobId, now, access channel, customer, key TTL (s). Returns
    /// {'requeued'} | {'missing'} | {'not_failed', status}.
    static let requeue = RedisScript(name: "requeue", source: claimFunctions + """
        local status = redis.call('HGET', KEYS[1], 'status')
        if not status then return {'missing'} end
        if status ~= 'failed' then return {'not_failed', status} end
        if not redis.call('HGET', KEYS[1], 'payload') then return {'missing'} end
        local entry = redis.call('HGET', KEYS[1], 'deadEntry')
        if entry then redis.call('XDEL', KEYS[3], entry) end
        redis.call('HSET', KEYS[1], 'status', 'queued', 'attempts', 0, 'updatedAt', ARGV[2], 'acceptedAt', ARGV[2])
        redis.call('HDEL', KEYS[1], 'reason', 'deadEntry', 'nextAttemptAt')
        for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
          if string.sub(field, 1, 6) == 'tries:' then redis.call('HDEL', KEYS[1], field) end
        end
        redis.call('PERSIST', KEYS[1])
        local entry = redis.call('XADD', KEYS[2], '*', 'job', ARGV[1])
        redis.call('HSET', KEYS[1], 'entry', entry)
        redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1])
        redis.call('ZREM', KEYS[6], ARGV[1])
        redis.call('SADD', KEYS[4], ARGV[1])
        redis.call('EXPIRE', KEYS[4], ARGV[5])
        if KEYS[7] then
          local holder = redis.call('GET', KEYS[7])
          if not holder or holder == ARGV[1] then redis.call('SET', KEYS[7], ARGV[1], 'EX', ARGV[5]) end
        end
        if KEYS[8] then
          local owner = redis.call('GET', KEYS[8])
          local held = owner and holders(owner, ARGV[4]) or 0
          -- A job dead-lettered by its record (its payload unreadable then) kept its hold: it is not taken twice.
          local kept = redis.call('HGET', KEYS[1], 'claimed') == '1' and held > 0
          local holds = not owner or held > 0
          redis.call('HSET', KEYS[1], 'claimed', holds and 1 or 0)
          if holds then redis.call('SET', KEYS[8], holding(ARGV[4], kept and held or held + 1), 'EX', ARGV[5]) end
        end
        redis.call('PUBLISH', ARGV[3], KEYS[4])
        return {'requeued'}
        """)

    /// Put back on the stream the unfinished jobs whose entry vanished (trimmed or deleted while waiting
    /// or pending): every job that should have an entry is in the in-flight set with the time it was last
    /// seen; those not seen since `olderThan` are checked, and a job whose entry is gone gets a new one.
    ///
    /// KEYS: inflight, stream. ARGV: olderThan (ms), limit, job key prefix, now (ms). Returns how many
    /// jobs were put back.
    static let restore = RedisScript(name: "restore", source: """
        local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
        local restored = 0
        for _, id in ipairs(stale) do
          local key = ARGV[3] .. id
          redis.call('ZREM', KEYS[1], id)
          local status = redis.call('HGET', key, 'status')
          if status and status ~= 'granted' and status ~= 'rejected' and status ~= 'failed' then
            local entry = redis.call('HGET', key, 'entry')
            if entry and #redis.call('XRANGE', KEYS[2], entry, entry) > 0 then
              redis.call('ZADD', KEYS[1], ARGV[4], id)
            else
              local fresh = redis.call('XADD', KEYS[2], '*', 'job', id)
              redis.call('HSET', key, 'entry', fresh)
              redis.call('ZADD', KEYS[1], ARGV[4], id)
              restored = restored + 1
            end
          end
        end
        return restored
        """)

    /// Resets the idle time of the entries a consumer still holds, so that no peer claims them while their
    /// jobs run longer than the claim idle time (several slow calls to Apple). An entry another consumer
    /// has claimed meanwhile, or one already acknowledged, is left alone. `JUSTID`: the delivery count
    /// stays as it is.
    ///
    /// KEYS: stream. ARGV: group, consumer, then entry ids. Returns how many entries were kept.
    static let keepHeld = RedisScript(name: "keep-held", source: """
        local kept = 0
        for i = 3, #ARGV do
          if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2]) > 0 then
            redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
            kept = kept + 1
          end
        end
        return kept
        """)

    /// Acknowledge and delete an entry that has nothing to record (its job is final or gone), in one step:
    /// an entry acknowledged but left in the stream would be delivered to nobody and count as queued for
    /// good (queued is the stream's length less the entries pending).
    ///
    /// KEYS: stream. ARGV: group, entry id.
    static let acknowledge = RedisScript(name: "acknowledge", source: """
        redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
        redis.call('XDEL', KEYS[1], ARGV[2])
        return 1
        """)

    /// Removes from the group the consumers that hold no entry and have not read for ARGV[2] ms: the names of
    /// workers that crashed or were killed (a clean stop leaves the group itself). Atomic, so a consumer
    /// cannot take an entry between the check and its removal; a live one that was removed (paused while
    /// PostgreSQL was away) is made again by its next read. Returns how many were removed.
    ///
    /// KEYS: stream. ARGV: group, min idle ms.
    static let forgetIdleConsumers = RedisScript(name: "forget_idle_consumers", source: """
        local removed = 0
        for _, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
            local fields = {}
            for i = 1, #consumer, 2 do fields[consumer[i]] = consumer[i + 1] end
            if fields['pending'] == 0 and fields['idle'] >= tonumber(ARGV[2]) then
                redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], fields['name'])
                removed = removed + 1
            end
        end
        return removed
        """)

    /// Removes a consumer from the group if it holds no entry.
    ///
    /// KEYS: stream. ARGV: group, consumer. Returns 1 when removed (or not there), 0 when it holds entries.
    static let leaveGroup = RedisScript(name: "leave_group", source: """
        if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then return 0 end
        redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
        return 1
        """)

    /// Every script, for loading at start.
    static let all = [
        enqueue, start, finish, retry, promote, deadLetter, requeue, restore, keepHeld, appleVerified, appleMalformed, acknowledge, forgetIdleConsumers,
        leaveGroup,
    ]
}
