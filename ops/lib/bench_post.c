// bench_post: the load generator of ops/bench's fill and paced phases (C, epoll, Linux only).
//
//   bench_post fill  --api URL --count N ...                 N distinct receipts, as fast as CONNECTIONS allow
//   bench_post paced --api URL --rate R --seconds S          request i is sent at start + i / R, whatever came back
//                    --accepted FILE ...                     before (open loop); accepted jobs to a TSV
//
// Both take --tag-number T --email-prefix P --bundle B --product P --offer O --connections C --results FILE
// --key PREFIX [--first N]. Publisher credentials come from BENCH_PUBLISHER_TOKEN and BENCH_BASIC_AUTH,
// never from the command line. Results are appended to --results as `key=value` lines, with the keys
// bench_load.py's report reads.
//
// Why C: the load generator shares the machine's two cores with everything it measures. The asyncio
// client it replaces cost 0.23-0.27 ms of CPU per request at 500-600 receipts/s, a tenth of the machine
// during the latency phases; this one is a write, a read and an epoll wake per request.
//
// Each connection carries one request at a time (keep-alive HTTP/1.1, TCP_NODELAY). Requests due while
// every connection is busy wait in order. Answers must carry Content-Length (Tollgate's always do).

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define TIMER_TAG UINT64_MAX
#define JOB_ID_MAX 64
// A run that is still waiting for answers this long after its last scheduled send gives up on them.
#define ANSWER_GRACE_S 60.0

struct request {
    char *raw;
    size_t length;
    double scheduled;  // wall-clock seconds (paced), 0 for fill
    double sent;
    double answered;
    int status;        // 0 = no answer yet; -1 = failed without an answer
    char job[JOB_ID_MAX + 1];
};

struct connection {
    int fd;
    long item;          // request in flight, -1 when idle
    size_t written;
    char *buffer;
    size_t used, capacity;
};

static struct {
    const char *mode, *api, *email_prefix, *bundle, *product, *offer, *results, *key, *accepted;
    long tag, count, first, connections;
    double rate, seconds;
} opt = {.connections = 64};

static char host[256];
static int port = 80;
static struct request *requests;
static long total;
static struct connection *connections;
static long *idle, idle_count;
static long *waiting, waiting_head, waiting_tail;
static long settled, errors, accepted_count;
static char first_error[256];
static struct sockaddr_in address;
static int epoll_fd;

static void die(const char *format, ...) {
    va_list args;
    va_start(args, format);
    fputs("bench_post: ", stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    exit(2);
}

static double wall_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double mono_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void note_error(const char *format, ...) {
    errors++;
    if (first_error[0] == '\0') {
        va_list args;
        va_start(args, format);
        vsnprintf(first_error, sizeof first_error, format, args);
        va_end(args);
    }
}

static char *base64(const char *input, size_t length) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc(4 * ((length + 2) / 3) + 1), *o = out;
    if (!out) die("out of memory");
    for (size_t i = 0; i < length; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)input[i] << 16;
        if (i + 1 < length) v |= (uint32_t)(unsigned char)input[i + 1] << 8;
        if (i + 2 < length) v |= (unsigned char)input[i + 2];
        *o++ = alphabet[(v >> 18) & 63];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = i + 1 < length ? alphabet[(v >> 6) & 63] : '=';
        *o++ = i + 2 < length ? alphabet[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

// The same receipts as bench_load.py's Receipts: one customer and one 18-digit transaction id per number.
static void build_request(struct request *r, long number, const char *token, const char *basic) {
    char transaction[32], scenario[1024], body[4096], head[2048];
    snprintf(transaction, sizeof transaction, "%02ld%016ld", opt.tag, number);
    int n = snprintf(scenario, sizeof scenario, "{\"bundleId\":\"%s\",\"inApp\":[{\"productId\":\"%s\",\"transactionId\":\"%s\"}]}",
                     opt.bundle, opt.product, transaction);
    if (n < 0 || (size_t)n >= sizeof scenario) die("the scenario is too long");
    char *receipt = base64(scenario, (size_t)n);
    int body_length = snprintf(body, sizeof body,
        "{\"customerEmail\":\"%s%ld@bench.example\",\"offerId\":\"%s\",\"receipt\":{\"transactionId\":\"%s\","
        "\"receiptData\":\"%s\"},\"appType\":\"ios\",\"ipAddress\":\"127.0.0.1\"}",
        opt.email_prefix, number, opt.offer, transaction, receipt);
    free(receipt);
    if (body_length < 0 || (size_t)body_length >= sizeof body) die("the request body is too long");
    int head_length = snprintf(head, sizeof head,
        "POST /apple/payment HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
        "X-Publisher-Token: %s\r\nAuthorization: Basic %s\r\nContent-Length: %d\r\n\r\n",
        host, port, token, basic, body_length);
    if (head_length < 0 || (size_t)head_length >= sizeof head) die("the request head is too long");
    r->length = (size_t)head_length + (size_t)body_length;
    r->raw = malloc(r->length);
    if (!r->raw) die("out of memory");
    memcpy(r->raw, head, (size_t)head_length);
    memcpy(r->raw + head_length, body, (size_t)body_length);
}

static void parse_api(const char *url) {
    const char *rest = strstr(url, "://");
    rest = rest ? rest + 3 : url;
    const char *colon = strchr(rest, ':');
    size_t length = colon ? (size_t)(colon - rest) : strcspn(rest, "/");
    if (length == 0 || length >= sizeof host) die("cannot read the host of %s", url);
    memcpy(host, rest, length);
    host[length] = '\0';
    if (colon) port = atoi(colon + 1);
    if (port <= 0 || port > 65535) die("cannot read the port of %s", url);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *found;
    if (getaddrinfo(host, NULL, &hints, &found) != 0) die("cannot resolve %s", host);
    address = *(struct sockaddr_in *)found->ai_addr;
    address.sin_port = htons((uint16_t)port);
    freeaddrinfo(found);
}

static void settle(long item, int status) {
    requests[item].status = status;
    settled++;
}

static int open_connection(struct connection *c) {
    // Connected while blocking (loopback, at start or after a loss), then switched to non-blocking.
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&address, sizeof address) < 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event event = {.events = EPOLLIN, .data.u64 = (uint64_t)(c - connections)};
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c->fd, &event) < 0) die("epoll_ctl: %s", strerror(errno));
    c->item = -1;
    c->used = 0;
    c->written = 0;
    return 0;
}

static void write_rest(struct connection *c);

static void send_on(struct connection *c, long item) {
    c->item = item;
    c->written = 0;
    requests[item].sent = wall_now();
    write_rest(c);
}

static void dispatch(long item) {
    if (idle_count > 0) send_on(&connections[idle[--idle_count]], item);
    else waiting[waiting_tail++] = item;
}

static void release(struct connection *c) {
    c->item = -1;
    if (waiting_head < waiting_tail) send_on(c, waiting[waiting_head++]);
    else idle[idle_count++] = c - connections;
}

// A connection that broke: its request (if any) failed; it is replaced once, or every waiting request fails.
static void lose(struct connection *c, const char *why) {
    if (c->item >= 0) {
        note_error("connection to %s:%d lost (%s)", host, port, why);
        settle(c->item, -1);
    }
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->item = -1;
    c->used = 0;
    if (open_connection(c) == 0) {
        release(c);
        return;
    }
    int alive = 0;
    for (long i = 0; i < opt.connections; i++) alive += connections[i].fd >= 0;
    if (alive == 0) {
        while (waiting_head < waiting_tail) {
            note_error("cannot connect to %s:%d", host, port);
            settle(waiting[waiting_head++], -1);
        }
    }
}

static void write_rest(struct connection *c) {
    struct request *r = &requests[c->item];
    while (c->written < r->length) {
        ssize_t n = write(c->fd, r->raw + c->written, r->length - c->written);
        if (n > 0) {
            c->written += (size_t)n;
        } else if (n < 0 && errno == EAGAIN) {
            struct epoll_event event = {.events = EPOLLIN | EPOLLOUT, .data.u64 = (uint64_t)(c - connections)};
            epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &event);
            return;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            lose(c, strerror(errno));
            return;
        }
    }
}

static void answered(struct connection *c, int status, const char *body, size_t body_length) {
    struct request *r = &requests[c->item];
    r->answered = wall_now();
    const char *job = status == 200 ? memmem(body, body_length, "\"jobId\":\"", 9) : NULL;
    if (job) {
        job += 9;
        const char *end = memchr(job, '"', body_length - (size_t)(job - body));
        if (end && end - job <= JOB_ID_MAX) {
            memcpy(r->job, job, (size_t)(end - job));
            r->job[end - job] = '\0';
        }
    }
    if (r->job[0]) {
        accepted_count++;
    } else {
        note_error("HTTP %d %.*s", status, (int)(body_length < 200 ? body_length : 200), body);
    }
    settle(c->item, status);
}

static void read_answers(struct connection *c) {
    for (;;) {
        if (c->capacity - c->used < 4096) {
            c->capacity = c->capacity ? c->capacity * 2 : 16384;
            c->buffer = realloc(c->buffer, c->capacity);
            if (!c->buffer) die("out of memory");
        }
        ssize_t n = read(c->fd, c->buffer + c->used, c->capacity - c->used);
        if (n == 0) {
            lose(c, "closed by the server");
            return;
        }
        if (n < 0) {
            if (errno == EAGAIN) break;
            if (errno == EINTR) continue;
            lose(c, strerror(errno));
            return;
        }
        c->used += (size_t)n;
    }
    while (c->fd >= 0) {
        char *head_end = memmem(c->buffer, c->used, "\r\n\r\n", 4);
        if (!head_end) return;
        size_t head_length = (size_t)(head_end - c->buffer) + 4;
        long content_length = -1;
        int keep = 1;
        for (char *line = c->buffer; line < head_end;) {
            char *next = memmem(line, (size_t)(head_end - line) + 2, "\r\n", 2);
            if (strncasecmp(line, "content-length:", 15) == 0) content_length = strtol(line + 15, NULL, 10);
            if (strncasecmp(line, "connection:", 11) == 0 && memmem(line, (size_t)(next - line), "close", 5)) keep = 0;
            line = next + 2;
        }
        if (content_length < 0) {
            lose(c, "an answer without Content-Length");
            return;
        }
        size_t whole = head_length + (size_t)content_length;
        if (c->used < whole) return;
        if (c->item < 0 || c->used < 12) {
            lose(c, "an answer nobody asked for");
            return;
        }
        answered(c, atoi(c->buffer + 9), c->buffer + head_length, (size_t)content_length);
        memmove(c->buffer, c->buffer + whole, c->used - whole);
        c->used -= whole;
        c->item = -1;
        if (!keep) {
            lose(c, "closed by the server");
            return;
        }
        release(c);
    }
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Nearest-rank percentile of an ascending array, as bench_load.py's percentile.
static double percentile(const double *sorted, long n, double p) {
    if (n == 0) return 0;
    long rank = (long)((p * (double)n + 99) / 100);
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return sorted[rank - 1];
}

static void usage(void) {
    die("usage: bench_post fill|paced --api URL --tag-number T --email-prefix P --bundle B --product P --offer O "
        "--results FILE --key PREFIX [--connections C] (fill: --count N; paced: --rate R --seconds S --accepted FILE "
        "[--first N])");
}

static void parse_arguments(int argc, char **argv) {
    if (argc < 2) usage();
    opt.mode = argv[1];
    for (int i = 2; i < argc; i += 2) {
        if (i + 1 >= argc) usage();
        const char *name = argv[i], *value = argv[i + 1];
        if (!strcmp(name, "--api")) opt.api = value;
        else if (!strcmp(name, "--tag-number")) opt.tag = atol(value);
        else if (!strcmp(name, "--email-prefix")) opt.email_prefix = value;
        else if (!strcmp(name, "--bundle")) opt.bundle = value;
        else if (!strcmp(name, "--product")) opt.product = value;
        else if (!strcmp(name, "--offer")) opt.offer = value;
        else if (!strcmp(name, "--connections")) opt.connections = atol(value);
        else if (!strcmp(name, "--results")) opt.results = value;
        else if (!strcmp(name, "--key")) opt.key = value;
        else if (!strcmp(name, "--count")) opt.count = atol(value);
        else if (!strcmp(name, "--rate")) opt.rate = atof(value);
        else if (!strcmp(name, "--seconds")) opt.seconds = atof(value);
        else if (!strcmp(name, "--first")) opt.first = atol(value);
        else if (!strcmp(name, "--accepted")) opt.accepted = value;
        else die("unknown option %s", name);
    }
    int paced = !strcmp(opt.mode, "paced");
    if (!paced && strcmp(opt.mode, "fill")) usage();
    if (!opt.api || !opt.email_prefix || !opt.bundle || !opt.product || !opt.offer || !opt.results || !opt.key) usage();
    if (opt.connections < 1) die("--connections must be at least 1");
    if (paced && (opt.rate <= 0 || opt.seconds <= 0 || !opt.accepted)) usage();
    if (!paced && opt.count < 1) usage();
}

int main(int argc, char **argv) {
    parse_arguments(argc, argv);
    const char *token = getenv("BENCH_PUBLISHER_TOKEN"), *basic = getenv("BENCH_BASIC_AUTH");
    if (!token || !*token || !basic || !*basic) die("BENCH_PUBLISHER_TOKEN and BENCH_BASIC_AUTH must be set");
    parse_api(opt.api);
    int paced = !strcmp(opt.mode, "paced");
    total = paced ? (long)(opt.rate * opt.seconds) : opt.count;
    if (total < 1) die("nothing to send");

    // Every request is built before the clock starts, so sending one costs a write.
    requests = calloc((size_t)total, sizeof *requests);
    waiting = calloc((size_t)total, sizeof *waiting);
    connections = calloc((size_t)opt.connections, sizeof *connections);
    idle = calloc((size_t)opt.connections, sizeof *idle);
    if (!requests || !waiting || !connections || !idle) die("out of memory");
    for (long i = 0; i < total; i++) build_request(&requests[i], opt.first + i, token, basic);

    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd < 0) die("epoll_create1: %s", strerror(errno));
    for (long i = 0; i < opt.connections; i++) {
        if (open_connection(&connections[i]) < 0) die("cannot connect to %s:%d: %s", host, port, strerror(errno));
        idle[idle_count++] = i;
    }
    int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timer < 0) die("timerfd_create: %s", strerror(errno));
    struct epoll_event timer_event = {.events = EPOLLIN, .data.u64 = TIMER_TAG};
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, timer, &timer_event);

    // One reading pairs the monotonic schedule with the wall clock Redis' stamps are compared with.
    double mono_start = mono_now() + 0.05, wall_start = wall_now() + 0.05;
    long next = 0;  // the next request to send
    if (!paced) {
        for (; next < total; next++) dispatch(next);
    }
    double give_up = mono_start + (paced ? opt.seconds : 0) + ANSWER_GRACE_S;
    struct epoll_event events[256];
    while (settled < total) {
        if (paced && next < total) {
            double now = mono_now();
            while (next < total && mono_start + (double)next / opt.rate <= now) {
                requests[next].scheduled = wall_start + (double)next / opt.rate;
                dispatch(next++);
            }
            if (next < total) {
                double due = mono_start + (double)next / opt.rate;
                struct itimerspec at = {.it_value = {.tv_sec = (time_t)due, .tv_nsec = (long)((due - (double)(time_t)due) * 1e9)}};
                if (at.it_value.tv_sec == 0 && at.it_value.tv_nsec == 0) at.it_value.tv_nsec = 1;
                timerfd_settime(timer, TFD_TIMER_ABSTIME, &at, NULL);
            }
        }
        if (settled >= total) break;
        if (mono_now() > give_up) {
            for (long i = 0; i < total; i++) {
                if (requests[i].status == 0) {
                    note_error("no answer within %.0f s", ANSWER_GRACE_S);
                    settle(i, -1);
                }
            }
            break;
        }
        int n = epoll_wait(epoll_fd, events, 256, 1000);
        if (n < 0 && errno != EINTR) die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            if (events[i].data.u64 == TIMER_TAG) {
                uint64_t expirations;
                (void)!read(timer, &expirations, sizeof expirations);
                continue;
            }
            struct connection *c = &connections[events[i].data.u64];
            if (c->fd < 0) continue;
            if (events[i].events & EPOLLOUT) {
                struct epoll_event event = {.events = EPOLLIN, .data.u64 = events[i].data.u64};
                epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &event);
                if (c->item >= 0) write_rest(c);
            }
            if (c->fd >= 0 && (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) read_answers(c);
        }
    }
    double seconds = paced ? wall_now() - wall_start : mono_now() - mono_start;

    FILE *results = fopen(opt.results, "a");
    if (!results) die("cannot open %s: %s", opt.results, strerror(errno));
    if (paced) {
        FILE *out = fopen(opt.accepted, "w");
        if (!out) die("cannot open %s: %s", opt.accepted, strerror(errno));
        double *lags = malloc(sizeof(double) * (size_t)total), *accept_ms = malloc(sizeof(double) * (size_t)total);
        long lag_count = 0, accept_count = 0;
        for (long i = 0; i < total; i++) {
            struct request *r = &requests[i];
            if (r->status == 0 || r->sent == 0) continue;
            if (r->status > 0) lags[lag_count++] = r->sent - r->scheduled;
            if (r->job[0]) {
                accept_ms[accept_count++] = (r->answered - r->sent) * 1000;
                fprintf(out, "%s\t%.3f\t%.3f\t%.3f\n", r->job, r->scheduled * 1000, r->sent * 1000, r->answered * 1000);
            }
        }
        fclose(out);
        qsort(lags, (size_t)lag_count, sizeof(double), compare_doubles);
        qsort(accept_ms, (size_t)accept_count, sizeof(double), compare_doubles);
        double achieved = seconds > 0 ? (double)accepted_count / seconds : 0;
        fprintf(results, "%starget_rps=%.3f\n%ssent=%ld\n%saccepted=%ld\n%serrors=%ld\n%sseconds=%.3f\n%sachieved_rps=%.3f\n"
                "%ssend_lag_p99_ms=%.3f\n%sclient_accept_p50_ms=%.3f\n%sclient_accept_p99_ms=%.3f\n",
                opt.key, opt.rate, opt.key, total, opt.key, accepted_count, opt.key, errors, opt.key, seconds,
                opt.key, achieved, opt.key, percentile(lags, lag_count, 99) * 1000,
                opt.key, percentile(accept_ms, accept_count, 50), opt.key, percentile(accept_ms, accept_count, 99));
        printf("==> paced: %ld/%ld accepted at %.0f/s (target %.0f/s), %ld errors, send lag p99 %.1f ms%s%s\n",
               accepted_count, total, achieved, opt.rate, errors, percentile(lags, lag_count, 99) * 1000,
               first_error[0] ? "; first error: " : "", first_error);
    } else {
        double rps = seconds > 0 ? (double)accepted_count / seconds : 0;
        fprintf(results, "%scount=%ld\n%saccepted=%ld\n%serrors=%ld\n%sseconds=%.3f\n%srps=%.3f\n",
                opt.key, total, opt.key, accepted_count, opt.key, errors, opt.key, seconds, opt.key, rps);
        printf("==> fill: %ld accepted, %ld errors in %.1fs (%.0f/s)%s%s\n", accepted_count, errors, seconds, rps,
               first_error[0] ? "; first error: " : "", first_error);
    }
    fclose(results);
    return errors == 0 ? 0 : 1;
}
