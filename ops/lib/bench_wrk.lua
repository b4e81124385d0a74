-- wrk script for ops/bench. One file, three modes, chosen by BENCH_MODE:
--   plain           the URL as given (the trivial-route reference)
--   payment         POST /apple/payment, a distinct valid receipt per request (distinct customer and
--                   Apple transaction id: a thread number and a counter per thread)
--   access_with     GET /v1/access-status for random customers of BENCH_ACCESS_PREFIX<0..COUNT-1>,
--                   who were granted the offer earlier in the run
--   access_without  GET /v1/access-status for random customers nobody-<0..COUNT-1>, who never bought anything
-- Both access modes poll a fixed population at random, as apps do, but far more often than an app's every
-- 5 s (at ~40,000 requests/s over 20,000 customers, each is asked about twice a second). Their warm-ups set
-- BENCH_SEQUENTIAL=1 and run one wrk thread: customers in order from BENCH_START, so that warm-ups following
-- each other ask every customer once and the measured phase is all access-cache hits (the report counts them).
-- A random warm-up left out e^(-requests/COUNT) of the customers, a host-dependent share: 6,589 first look-ups
-- in a measured phase after a slow warm-up (22,229 requests over 20,000 customers; e^(-1.11) x 20,000 = 6,582).
-- Publisher credentials come from the environment (BENCH_PUBLISHER_TOKEN, BENCH_BASIC_AUTH), never the
-- command line. At the end it prints one line `BENCH_JSON {...}` with requests/s and latency percentiles (µs).

local mode = os.getenv("BENCH_MODE") or "plain"
local token = os.getenv("BENCH_PUBLISHER_TOKEN") or ""
local basic = os.getenv("BENCH_BASIC_AUTH") or ""
local bundle = os.getenv("BENCH_BUNDLE") or "com.example.bench"
local product = os.getenv("BENCH_PRODUCT") or "com.example.bench.premium"
local offer = os.getenv("BENCH_OFFER") or "BENCH_PREMIUM"
local tag = tonumber(os.getenv("BENCH_TAG") or "10")
local email_tag = os.getenv("BENCH_EMAIL_TAG") or "a"
local access_prefix = os.getenv("BENCH_ACCESS_PREFIX") or "f1-"
local access_count = tonumber(os.getenv("BENCH_ACCESS_COUNT") or "1")
local sequential = os.getenv("BENCH_SEQUENTIAL") == "1"
local start = tonumber(os.getenv("BENCH_START") or "0")

-- Standard base64 (RFC 4648, padded); used at start only.
local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local function base64(data)
  local out = {}
  for i = 1, #data, 3 do
    local a, b, c = data:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local c1 = math.floor(n / 262144) % 64
    local c2 = math.floor(n / 4096) % 64
    local c3 = math.floor(n / 64) % 64
    local c4 = n % 64
    out[#out + 1] = alphabet:sub(c1 + 1, c1 + 1) .. alphabet:sub(c2 + 1, c2 + 1)
      .. (b and alphabet:sub(c3 + 1, c3 + 1) or "=") .. (c and alphabet:sub(c4 + 1, c4 + 1) or "=")
  end
  return table.concat(out)
end

-- A receipt is base64 of the emulator's scenario JSON. The 18-digit transaction id starts on a 3-byte
-- boundary (the JSON prefix is padded with spaces), so its base64 is the concatenation of the base64 of
-- its six 3-digit groups: a per-request receipt costs six table look-ups, not an encoder run.
local receipt_prefix = '{"bundleId":"' .. bundle .. '","inApp":[{"productId":"' .. product .. '","transactionId":"'
while #receipt_prefix % 3 ~= 0 do
  receipt_prefix = "{ " .. receipt_prefix:sub(2)
end
local receipt_prefix64 = base64(receipt_prefix)
local receipt_suffix64 = base64('"}]}')
local group64 = {}
for g = 0, 999 do
  group64[string.format("%03d", g)] = base64(string.format("%03d", g))
end

local function receipt_for(txn)
  return receipt_prefix64
    .. group64[txn:sub(1, 3)] .. group64[txn:sub(4, 6)] .. group64[txn:sub(7, 9)]
    .. group64[txn:sub(10, 12)] .. group64[txn:sub(13, 15)] .. group64[txn:sub(16, 18)]
    .. receipt_suffix64
end

local thread_count = 0
function setup(thread)
  thread_count = thread_count + 1
  thread:set("tid", thread_count)
end

local counter = 0
local headers = {}
local access_path = "/v1/access-status?offerId=" .. offer .. "&customerEmail="

function init(args)
  headers["X-Publisher-Token"] = token
  headers["Authorization"] = "Basic " .. basic
  if mode == "payment" then
    headers["Content-Type"] = "application/json"
  end
  math.randomseed((tid or 1) * 7919 + os.time())
end

-- The customer number of the current request (after `counter` counted it).
local function customer()
  if sequential then
    return (start + counter - 1) % access_count
  end
  return math.random(0, access_count - 1)
end

local function dynamic_request()
  counter = counter + 1
  if mode == "payment" then
    local txn = string.format("%02d%02d%014d", tag, tid, counter)
    local body = '{"customerEmail":"' .. email_tag .. tid .. "-" .. counter .. '@bench.example","offerId":"' .. offer
      .. '","receipt":{"transactionId":"' .. txn .. '","receiptData":"' .. receipt_for(txn)
      .. '"},"appType":"ios","ipAddress":"127.0.0.1"}'
    return wrk.format("POST", "/apple/payment", headers, body)
  elseif mode == "access_with" then
    return wrk.format("GET", access_path .. access_prefix .. customer() .. "%40bench.example", headers)
  elseif mode == "access_without" then
    return wrk.format("GET", access_path .. "nobody-" .. customer() .. "%40bench.example", headers)
  end
  return wrk.format(nil, nil, headers)
end

-- The plain mode keeps wrk's static request (no Lua per request), as a reference should.
if mode ~= "plain" then
  request = dynamic_request
end

function done(summary, latency, requests)
  local seconds = summary.duration / 1e6
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"mode":"%s","requests":%d,"seconds":%.3f,"rps":%.1f,"p50_us":%d,"p90_us":%d,"p99_us":%d,'
      .. '"max_us":%d,"mean_us":%.1f,"errors_connect":%d,"errors_read":%d,"errors_write":%d,'
      .. '"errors_status":%d,"errors_timeout":%d}\n',
    mode, summary.requests, seconds, summary.requests / seconds, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, latency.mean, e.connect, e.read, e.write, e.status, e.timeout))
end
