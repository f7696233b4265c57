/* null_server.c: scripts/null_server.py's null data server in C (C11 + POSIX + Linux epoll,
 * one thread), so that a benchmark measures the official client against a server that
 * answers in a few microseconds of C rather than tens of Python.
 *
 * Contract: the docstring of scripts/null_server.py, the same in every observable way:
 * the command line (--host, --port, --read-hold, --max-seconds), the ready line, the
 * "stats" and "delay SECONDS" lines on stdin and their JSON answers, the same replies byte
 * for byte, the same refusals (closed without a reply) and the same counters. Frames are
 * checked the way segmentstore_client.protocol's FrameDecoder checks them
 * (null_server_wire.h), and every frame of one read is validated before any is answered,
 * as one FrameDecoder.feed raises before returning any command. Strings echoed in replies
 * are re-encoded as the Python codec does, and segment names are keyed that way.
 *
 * Bounds: a frame's declared length at most MAX_PAYLOAD (checked before buffering), 64
 * held reads per connection, and a connection is not read while it has more than
 * HIGH_WATER bytes unsent or MAX_DELAYED batches (or MAX_DELAYED_BYTES) of delayed
 * replies. Memory per frame: none; buffers grow per connection and shrink when idle.
 * Build: cc -O2 -std=c11 -o null_server null_server.c (null_server.py's build_c_server).
 * tests/streams/test_null_server_parity.py compares its bytes with the Python server's. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "null_server_wire.h"

#define MAX_HELD_READS 64
#define MAX_DELAYED 4096
#define MAX_DELAYED_BYTES (8u << 20)
#define HIGH_WATER (64u * 1024)
#define LOW_WATER (16u * 1024)
#define READ_CHUNK (256u * 1024)
#define NEW_WRITER INT64_MIN
#define NEVER 1e300
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* ---- maps: open addressing over objects that start with their key ---- */
struct hkey { const uint8_t *k; size_t n; };
struct map { struct hkey **slot; size_t cap, n; };

static uint64_t hash(const uint8_t *k, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ k[i]) * 1099511628211ull;
    return h;
}
static struct hkey **find(struct map *m, const uint8_t *k, size_t n) {
    if (m->cap == 0) return NULL;
    for (size_t i = hash(k, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        struct hkey *e = m->slot[i];
        if (e == NULL || (e->n == n && memcmp(e->k, k, n) == 0)) return &m->slot[i];
    }
}
static void *get(struct map *m, const uint8_t *k, size_t n) {
    struct hkey **s = find(m, k, n);
    return s ? *s : NULL;
}
static void put(struct map *m, struct hkey *e) { /* e's key is not in m */
    if (2 * (m->n + 1) > m->cap) {
        struct map bigger = {calloc(m->cap ? 2 * m->cap : 16, sizeof *m->slot), m->cap ? 2 * m->cap : 16, 0};
        if (bigger.slot == NULL) abort();
        for (size_t i = 0; i < m->cap; i++) if (m->slot[i]) *find(&bigger, m->slot[i]->k, m->slot[i]->n) = m->slot[i], bigger.n++;
        free(m->slot);
        *m = bigger;
    }
    *find(m, e->k, e->n) = e;
    m->n++;
}
static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (p == NULL) abort();
    return p;
}

/* The store: segments by canonical name, (segment, writer) -> last event number. */
struct segment { struct hkey hk; int64_t offset; uint8_t name[]; };
struct wrec { struct hkey hk; uint8_t key[sizeof(void *) + 16]; struct segment *seg; int64_t last; };
struct cwriter { struct hkey hk; uint8_t id[16]; struct wrec *w; }; /* set up on one connection */
static struct map segments, wrecs;

static struct segment *segment_of(const struct name *nm, bool create) {
    struct segment *s = get(&segments, nm->b, nm->n);
    if (s == NULL && create) {
        s = xmalloc(sizeof *s + nm->n + 1);
        memcpy(s->name, nm->b, nm->n);
        s->hk = (struct hkey){s->name, nm->n};
        s->offset = 0;
        put(&segments, &s->hk);
    }
    return s;
}

/* ---- counters: Python's Counter, keys in the order first incremented ---- */
static struct { char name[48]; int64_t v; } counts[256];
static size_t ncounts;
static int64_t *counter(const char *name) {
    for (size_t i = 0; i < ncounts; i++) if (strcmp(counts[i].name, name) == 0) return &counts[i].v;
    if (ncounts == 256) { static int64_t spill; return &spill; } /* names come from CMDS only */
    snprintf(counts[ncounts].name, sizeof counts[0].name, "%s", name);
    return &counts[ncounts++].v;
}
#define COUNT(var, name, n) do { static int64_t *var; if (!var) var = counter(name); *var += (n); } while (0)

static void print_counts(void) {
    printf("{");
    for (size_t i = 0; i < ncounts; i++) printf("%s\"%s\": %lld", i ? ", " : "", counts[i].name, (long long)counts[i].v);
    printf("}\n");
    fflush(stdout);
}

/* ---- connections ---- */
struct buf { uint8_t *b; size_t len, cap; };
static void reserve(struct buf *x, size_t more) {
    if (x->cap - x->len >= more) return;
    size_t cap = x->cap ? x->cap : 4096;
    while (cap - x->len < more) cap *= 2;
    x->b = realloc(x->b, cap);
    if (x->b == NULL) abort();
    x->cap = cap;
}
struct held { double due; struct buf frame; };
struct batch { double arrived, due; size_t end; }; /* delayed replies: dly.b[previous end..end) */
struct conn {
    int fd;
    bool greeted, closing, reading, writing;
    struct buf in, out, dly; /* received; to send (from out_sent); delayed (from dly_sent) */
    size_t out_sent, dly_sent;
    struct map writers;
    struct held held[MAX_HELD_READS];
    int nheld;
    struct batch *batches; /* a ring of MAX_DELAYED */
    size_t bhead, nb;
    struct conn *next, *prev;
};
static struct conn *conns;
static int ep;
static double ack_delay, read_hold;
static size_t timed; /* held reads + delayed batches, over every connection */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void drop(struct conn *c) { /* close at once, nothing more is sent */
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    for (size_t i = 0; i < c->writers.cap; i++) free(c->writers.slot[i]);
    free(c->writers.slot);
    for (int i = 0; i < MAX_HELD_READS; i++) free(c->held[i].frame.b); /* slots keep theirs */
    timed -= (size_t)c->nheld + c->nb;
    free(c->in.b), free(c->out.b), free(c->dly.b), free(c->batches);
    if (c->prev) c->prev->next = c->next; else conns = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c);
}

static void refuse(struct conn *c, const char *why) {
    char key[64];
    COUNT(refused, "refused", 1);
    snprintf(key, sizeof key, "refused:%s", why);
    *counter(key) += 1;
    drop(c);
}

/* Read only while output is bounded; write while there is something to send. Returns
 * false when the connection was closed (a closing one that has sent everything). */
static bool flow(struct conn *c) {
    size_t unsent = c->out.len - c->out_sent;
    if (c->closing && unsent == 0) { drop(c); return false; }
    bool over = c->nb >= MAX_DELAYED || c->dly.len - c->dly_sent >= MAX_DELAYED_BYTES;
    bool reading = !c->closing && !over && (c->reading ? unsent <= HIGH_WATER : unsent <= LOW_WATER);
    bool writing = unsent > 0;
    if (reading != c->reading || writing != c->writing) {
        struct epoll_event e = {.events = (reading ? EPOLLIN : 0u) | (writing ? EPOLLOUT : 0u), .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
        c->reading = reading, c->writing = writing;
    }
    return true;
}

static bool send_out(struct conn *c) {
    while (c->out_sent < c->out.len) {
        ssize_t w = write(c->fd, c->out.b + c->out_sent, c->out.len - c->out_sent);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR) break;
            drop(c);
            return false;
        }
        c->out_sent += (size_t)w;
    }
    if (c->out_sent == c->out.len) c->out.len = c->out_sent = 0;
    else if (c->out_sent > c->out.len / 2) {
        memmove(c->out.b, c->out.b + c->out_sent, c->out.len - c->out_sent);
        c->out.len -= c->out_sent, c->out_sent = 0;
    }
    return flow(c);
}

/* ---- replies ---- */
static uint8_t *frame(struct buf *o, int type, size_t payload) {
    reserve(o, 8 + payload);
    uint8_t *p = o->b + o->len;
    o->len += 8 + payload;
    return wr32(wr32(p, type), (int32_t)payload);
}
static uint8_t *wrstr(uint8_t *p, const uint8_t *s, size_t n) {
    *p++ = (uint8_t)(n >> 8), *p++ = (uint8_t)n;
    memcpy(p, s, n);
    return p + n;
}
static void data_appended(struct buf *o, const uint8_t *wid, int64_t ev, int64_t prev, int64_t rid, int64_t off) {
    uint8_t *p = frame(o, 7, 48);
    memcpy(p, wid, 16);
    wr64(wr64(wr64(wr64(p + 16, ev), prev), rid), off);
}

/* Take field i of a parsed frame as a string: its raw bytes. */
static void str_field(const uint8_t *b, const struct fields *f, int i, const uint8_t **s, size_t *n) {
    *n = (size_t)b[f->off[i]] << 8 | b[f->off[i] + 1];
    *s = b + f->off[i] + 2;
}

/* Answer one validated frame into o; false when the connection must be refused (the
 * reason in *why). */
static bool answer(struct conn *c, size_t ci, const uint8_t *b, const struct fields *f, struct buf *o, const char **why) {
    int type = CMDS[ci].type;
    *why = CMDS[ci].name;
    if (!c->greeted) {
        if (type != T_HELLO) return false;
        c->greeted = true;
        wr32(wr32(frame(o, T_HELLO, 8), 17), 5);
        return true;
    }
    if (type == T_BLOCK_END || type == T_COND_END) {
        struct cwriter *w = get(&c->writers, b, 16);
        if (w == NULL) return false;
        struct wrec *r = w->w;
        const uint8_t *data_at = b + f->off[type == T_BLOCK_END ? 2 : 3];
        size_t data_len = (size_t)rd32(data_at);
        int64_t rid = type == T_COND_END ? rd64(b + f->off[4]) : f->present[5] ? rd64(b + f->off[5]) : -1;
        int64_t previous = r->last;
        if (type == T_BLOCK_END) {
            int32_t whole = rd32(b + f->off[1]), events = rd32(b + f->off[3]);
            int64_t last = rd64(b + f->off[4]);
            if ((size_t)(uint32_t)whole != data_len || whole < 0 || events < 1) return false;
            if (last > previous) {
                r->seg->offset += (int64_t)data_len;
                r->last = last;
                COUNT(blocks, "blocks", 1);
                COUNT(evs, "events", events);
                COUNT(bytes, "bytes", (int64_t)data_len);
            } else COUNT(resent, "resent_blocks", 1);
            data_appended(o, b, last, previous, rid, r->seg->offset);
            return true;
        }
        int64_t ev = rd64(b + f->off[1]), expected = rd64(b + f->off[2]);
        if (expected != r->seg->offset) {
            COUNT(failed, "conditional_failed", 1);
            uint8_t *p = frame(o, 8, 32);
            memcpy(p, b, 16);
            wr64(wr64(p + 16, ev), rid);
            return true;
        }
        r->seg->offset = expected + (int64_t)data_len;
        r->last = previous > ev ? previous : ev;
        COUNT(cblocks, "conditional_blocks", 1);
        COUNT(bytes, "bytes", (int64_t)data_len);
        data_appended(o, b, ev, previous, rid, r->seg->offset);
        return true;
    }
    if (type == T_KEEPALIVE) {
        frame(o, T_KEEPALIVE, 0);
        return true;
    }
    if (CMDS[ci].reply || CMDS[ci].rid < 0) return false;
    *counter(CMDS[ci].name) += 1;
    int ri = CMDS[ci].rid;
    int64_t rid = f->present[ri] ? rd64(b + f->off[ri]) : -1;
    const uint8_t *s;
    size_t n;
    struct name nm;
    if (type == T_SETUP || type == T_INFO || type == T_CREATE || type == T_READ) {
        str_field(b, f, type == T_SETUP ? 2 : type == T_READ ? 0 : 1, &s, &n);
        decode_name(s, n, &nm);
        if (nm.n > 0xFFFF) { *why = "unencodable"; return false; } /* no reply can carry it */
    }
    if (type == T_SETUP) {
        const uint8_t *wid = b + f->off[1];
        if (nm.problem[0]) {
            size_t pn = strlen(nm.problem);
            uint8_t *p = frame(o, 61, 8 + 2 + nm.n + 2 + pn + 4);
            wr32(wrstr(wrstr(wr64(p, rid), nm.b, nm.n), (const uint8_t *)nm.problem, pn), -1);
            return true;
        }
        struct segment *seg = segment_of(&nm, true);
        uint8_t key[sizeof(void *) + 16];
        memcpy(key, &seg, sizeof seg), memcpy(key + sizeof seg, wid, 16);
        struct wrec *r = get(&wrecs, key, sizeof key);
        if (r == NULL) {
            r = xmalloc(sizeof *r);
            memcpy(r->key, key, sizeof key);
            r->hk = (struct hkey){r->key, sizeof key}, r->seg = seg, r->last = NEW_WRITER;
            put(&wrecs, &r->hk);
        }
        struct cwriter *w = get(&c->writers, wid, 16);
        if (w == NULL) {
            w = xmalloc(sizeof *w);
            memcpy(w->id, wid, 16);
            w->hk = (struct hkey){w->id, 16};
            put(&c->writers, &w->hk);
        }
        w->w = r;
        uint8_t *p = frame(o, 2, 8 + 2 + nm.n + 16 + 8);
        p = wrstr(wr64(p, rid), nm.b, nm.n);
        memcpy(p, wid, 16);
        wr64(p + 16, r->last);
        return true;
    }
    if (type == T_INFO) {
        struct segment *seg = segment_of(&nm, false);
        uint8_t *p = frame(o, 12, 8 + 2 + nm.n + 3 + 24);
        p = wrstr(wr64(p, rid), nm.b, nm.n);
        p[0] = 1, p[1] = 0, p[2] = 0;
        wr64(wr64(wr64(p + 3, 0), seg ? seg->offset : 0), 0);
        return true;
    }
    if (type == T_CREATE) {
        segment_of(&nm, true);
        wrstr(wr64(frame(o, 21, 8 + 2 + nm.n), rid), nm.b, nm.n);
        return true;
    }
    if (type == T_READ) { /* held, then answered empty at the tail */
        if (c->nheld >= MAX_HELD_READS) { *why = "too many reads"; return false; }
        struct held *h = &c->held[c->nheld++];
        timed++;
        h->due = now() + read_hold;
        h->frame.len = 0; /* the slot's buffer is reused */
        uint8_t *p = frame(&h->frame, 10, 2 + nm.n + 8 + 2 + 4 + 8);
        p = wr64(wrstr(p, nm.b, nm.n), rd64(b + f->off[1]));
        p[0] = 1, p[1] = 0;
        wr64(wr32(p + 2, 0), rid);
        return true;
    }
    size_t nn = strlen(CMDS[ci].name);
    uint8_t *p = wrstr(wr64(frame(o, 57, 8 + 2 + nn + 2), rid), (const uint8_t *)CMDS[ci].name, nn);
    p[0] = p[1] = 0; /* serverStackTrace: "" */
    return true;
}

/* Validate every whole frame received (refusing on the first bad one, before answering
 * any, as one FrameDecoder.feed raises before returning any command), then answer them
 * as one batch. False when the connection is gone. */
static bool process(struct conn *c) {
    size_t pos = 0, len = c->in.len, whole = 0;
    const uint8_t *b = c->in.b;
    struct fields f = {0};
    while (len - pos >= 8) {
        int32_t type = rd32(b + pos), n = rd32(b + pos + 4);
        if (type < -128 || type > 127 || by_type[type + 128] < 0 || n < 0 || n > MAX_PAYLOAD) {
            refuse(c, "undecodable");
            return false;
        }
        if (len - pos - 8 < (size_t)n) {
            reserve(&c->in, 8 + (size_t)n - (len - pos)); /* room for the rest of this frame */
            break;
        }
        if (!parse((size_t)by_type[type + 128], b + pos + 8, (size_t)n, &f)) {
            refuse(c, "undecodable");
            return false;
        }
        pos += 8 + (size_t)n;
        whole = pos;
    }
    b = c->in.b; /* reserve may have moved it */
    bool delayed = ack_delay > 0;
    struct buf *o = delayed ? &c->dly : &c->out;
    size_t before = o->len;
    for (pos = 0; pos < whole;) {
        size_t ci = (size_t)by_type[rd32(b + pos) + 128], n = (size_t)rd32(b + pos + 4);
        const char *why;
        parse(ci, b + pos + 8, n, &f);
        if (!answer(c, ci, b + pos + 8, &f, o, &why)) {
            refuse(c, why);
            return false;
        }
        pos += 8 + n;
    }
    memmove(c->in.b, c->in.b + whole, c->in.len - whole);
    c->in.len -= whole;
    if (c->in.len == 0 && c->in.cap > 4 * READ_CHUNK) { /* after a big frame */
        free(c->in.b);
        c->in = (struct buf){0};
    }
    if (o->len == before) return flow(c);
    if (!delayed) return send_out(c);
    if (c->batches == NULL) c->batches = xmalloc(MAX_DELAYED * sizeof *c->batches);
    double t = now();
    c->batches[(c->bhead + c->nb++) % MAX_DELAYED] = (struct batch){t, t + ack_delay, o->len};
    timed++;
    return flow(c);
}

static void on_readable(struct conn *c) {
    reserve(&c->in, READ_CHUNK);
    ssize_t r = read(c->fd, c->in.b + c->in.len, c->in.cap - c->in.len);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (r <= 0) { /* end of stream: send what is due, drop what is held (asyncio's close) */
        if (r < 0) { drop(c); return; }
        timed -= (size_t)c->nheld + c->nb;
        c->nheld = 0, c->nb = 0, c->closing = true;
        flow(c);
        return;
    }
    c->in.len += (size_t)r;
    process(c);
}

/* Send every held read and delayed batch that is due; return the next due time. */
static double fire(struct conn *c, double t, bool *alive) {
    double next = NEVER;
    bool sent = false;
    int k = 0; /* held reads are due in arrival order (one hold for all): a prefix is due */
    while (k < c->nheld && c->held[k].due <= t) {
        reserve(&c->out, c->held[k].frame.len);
        memcpy(c->out.b + c->out.len, c->held[k].frame.b, c->held[k].frame.len);
        c->out.len += c->held[k++].frame.len;
    }
    if (k > 0) { /* the answered slots move behind the waiting ones, buffers kept for reuse */
        static struct held done[MAX_HELD_READS];
        memcpy(done, c->held, (size_t)k * sizeof *done);
        memmove(c->held, c->held + k, (size_t)(MAX_HELD_READS - k) * sizeof *done);
        memcpy(c->held + MAX_HELD_READS - k, done, (size_t)k * sizeof *done);
        c->nheld -= k, timed -= (size_t)k, sent = true;
    }
    if (c->nheld > 0) next = MIN(next, c->held[0].due);
    while (c->nb > 0) {
        struct batch *x = &c->batches[c->bhead];
        if (x->due > t) { next = MIN(next, x->due); break; }
        COUNT(held_batches, "held_batches", 1);
        COUNT(held_us, "held_us", (int64_t)((t - x->arrived) * 1e6 + 0.5));
        reserve(&c->out, x->end - c->dly_sent);
        memcpy(c->out.b + c->out.len, c->dly.b + c->dly_sent, x->end - c->dly_sent);
        c->out.len += x->end - c->dly_sent;
        c->dly_sent = x->end;
        c->bhead = (c->bhead + 1) % MAX_DELAYED, c->nb--, timed--, sent = true;
    }
    if (c->nb == 0 && c->dly_sent > 0) c->dly.len = c->dly_sent = 0; /* batch ends are offsets */
    *alive = sent ? send_out(c) : flow(c);
    return next;
}

static void on_accept(int lfd) {
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = calloc(1, sizeof *c);
        if (c == NULL) abort();
        c->fd = fd, c->reading = true, c->next = conns;
        if (conns) conns->prev = c;
        conns = c;
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
        COUNT(connections, "connections", 1);
    }
}

static void print_delay(void) {
    char s[40];
    for (int prec = 1; prec <= 17; prec++) { /* the shortest text that reads back equal, as repr */
        snprintf(s, sizeof s, "%.*g", prec, ack_delay);
        if (strtod(s, NULL) == ack_delay) break;
    }
    printf("{\"ack_delay\": %s%s}\n", s, strpbrk(s, ".en") ? "" : ".0");
    fflush(stdout);
}

static bool blank(const char *s) {
    for (; *s; s++) if (*s != ' ' && *s != '\t' && *s != '\r') return false;
    return true;
}

/* Lines on stdin: "stats" and "delay SECONDS". False at end of input. */
static bool on_control(void) {
    static char line[4096];
    static size_t have;
    ssize_t r = read(0, line + have, sizeof line - 1 - have);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    if (r <= 0) return false;
    have += (size_t)r;
    char *nl;
    while ((nl = memchr(line, '\n', have)) != NULL || have == sizeof line - 1) {
        size_t n = nl ? (size_t)(nl - line) : have;
        line[n] = 0;
        char *w = line + strspn(line, " \t\r"), *end;
        size_t wn = strcspn(w, " \t\r");
        if (wn == 5 && memcmp(w, "stats", 5) == 0 && blank(w + 5)) print_counts();
        else if (wn == 5 && memcmp(w, "delay", 5) == 0) {
            double d = strtod(w + 5, &end);
            if (end == w + 5 || !blank(end) || !(d > -1e9 && d < 1e9)) /* NaN, inf */
                fprintf(stderr, "null_server: not a number of seconds: %s\n", w + 6);
            else ack_delay = d > 0 ? d : 0.0, print_delay();
        }
        size_t used = nl ? n + 1 : have;
        memmove(line, line + used, have - used);
        have -= used;
    }
    return true;
}

static int usage(const char *why) {
    fprintf(stderr, "usage: null_server [--host HOST] [--port PORT] [--read-hold SECONDS] [--max-seconds SECONDS]\n"
                    "null_server: error: %s\n", why);
    return 2;
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1";
    long port = 0;
    double max_seconds = 3600.0;
    read_hold = 10.0;
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i], *val = strchr(arg, '=');
        size_t klen = val ? (size_t)(val - arg) : strlen(arg);
        if (val) val++;
        else if (i + 1 < argc) val = argv[++i];
        else return usage("every option takes a value");
        char *end;
        if (strncmp(arg, "--host", klen) == 0 && klen == 6) host = val;
        else if (strncmp(arg, "--port", klen) == 0 && klen == 6) port = strtol(val, &end, 10);
        else if (strncmp(arg, "--read-hold", klen) == 0 && klen == 11) read_hold = strtod(val, &end);
        else if (strncmp(arg, "--max-seconds", klen) == 0 && klen == 13) max_seconds = strtod(val, &end);
        else return usage("unrecognized arguments");
        if (arg[2] != 'h' && (*end != 0 || end == val)) return usage("invalid number");
    }
    if (strncmp(host, "127.", 4) != 0) {
        fprintf(stderr, "null_server: refusing to listen on %s: loopback only\n", host);
        return 2;
    }
    compile_table();
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (port < 0 || port > 65535 || inet_pton(AF_INET, host, &a.sin_addr) != 1 ||
        bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 256) < 0) {
        fprintf(stderr, "null_server: cannot listen on %s:%ld: %s\n", host, port, errno ? strerror(errno) : "bad address");
        return 3;
    }
    socklen_t alen = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &alen);
    char shown[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a.sin_addr, shown, sizeof shown);
    printf("null server listening on %s:%d\n", shown, ntohs(a.sin_port));
    fflush(stdout);
    ep = epoll_create1(EPOLL_CLOEXEC);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    static int lmark, tmark, smark;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &lmark};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &e);
    e.data.ptr = &tmark;
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &e);
    e.data.ptr = &smark;
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    bool stdin_polled = epoll_ctl(ep, EPOLL_CTL_ADD, 0, &e) == 0; /* not for a plain file */
    double deadline = now() + MIN(max_seconds, 1e9), armed = -1;
    for (bool running = stdin_polled || on_control(); running;) {
        double t = now(), next = deadline;
        if (t >= deadline) break;
        if (timed > 0) {
            for (struct conn *c = conns, *n; c; c = n) {
                n = c->next;
                bool alive;
                next = MIN(next, fire(c, t, &alive));
            }
        }
        if (next != armed) {
            struct itimerspec it = {.it_value = {(time_t)next, (long)((next - (double)(time_t)next) * 1e9)}};
            if (it.it_value.tv_sec == 0 && it.it_value.tv_nsec == 0) it.it_value.tv_nsec = 1;
            timerfd_settime(tfd, TFD_TIMER_ABSTIME, &it, NULL);
            armed = next;
        }
        struct epoll_event evs[64];
        int k = epoll_wait(ep, evs, 64, -1);
        for (int i = 0; i < k; i++) {
            void *p = evs[i].data.ptr;
            if (p == &lmark) on_accept(lfd);
            else if (p == &tmark) { uint64_t x; if (read(tfd, &x, sizeof x) < 0) {} }
            else if (p == &smark) running = on_control() && running;
            else {
                struct conn *c = p;
                bool alive = true;
                if (evs[i].events & (EPOLLOUT | EPOLLERR)) alive = send_out(c);
                if (alive && evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
            }
        }
    }
    print_counts();
    return 0;
}
