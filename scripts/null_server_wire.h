/* null_server_wire.h: the wire half of scripts/null_server.c (included by it, once).
 *
 * Contract: what segmentstore_client.protocol's FrameDecoder accepts, checked without
 * allocating: ``parse`` takes one frame's payload and its type's index in CMDS and says
 * whether the Python decoder would decode it (every field kind of protocol/_compile.py,
 * with the same bounds: optional trailing fields, i32 length prefixes, list counts
 * against the bytes left, writeUTF strings decoded as primitives.decode_str_body
 * decodes them), recording where each field starts. ``decode_name`` turns a string
 * field into the bytes the Python codec writes back for it (modified UTF-8 of its
 * UTF-16 units) and name_problem's text. CMDS is a copy of the protocol registry
 * (tests/streams/test_null_server_parity.py checks it). Big-endian helpers rd/wr. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_PAYLOAD (0x00FFFFFF - 8) /* MAX_PAYLOAD_TO_SERVER */
#define MAX_NAME_BYTES (32 * 1024)
#define MAXF 8 /* fields per command, at most */

/* ---- the wire command table (facts from client/segmentstore_client/protocol) ---- */
struct cmd {
    int type;
    const char *name, *spec;
    int reply, rid; /* a Reply subclass; index of request_id among the fields, -1: none */
};
static const struct cmd CMDS[] = {
    {-127, "Hello", "i32 i32", 0, -1},
    {-6, "StorageChunksListed", "i64 chunks", 1, 0},
    {-5, "ListStorageChunks", "str str i64", 0, 2},
    {-4, "StorageFlushed", "i64", 1, 0},
    {-3, "FlushToStorage", "i32 str i64", 0, 2},
    {-2, "PartialEvent", "tail", 0, -1},
    {-1, "Padding", "padding", 0, -1},
    {0, "Event", "tail", 0, -1},
    {1, "SetupAppend", "i64 uuid str str", 0, 0},
    {2, "AppendSetup", "i64 str uuid i64", 1, 0},
    {3, "AppendBlock", "uuid tail", 0, -1},
    {4, "AppendBlockEnd", "uuid i32 bytes i32 i64 i64?", 0, 5},
    {5, "ConditionalAppend", "uuid i64 i64 event i64?", 0, 4},
    {7, "DataAppended", "uuid i64 i64? i64? i64?", 1, 3},
    {8, "ConditionalCheckFailed", "uuid i64 i64?", 1, 2},
    {9, "ReadSegment", "str i64 i32 str i64?", 0, 4},
    {10, "SegmentRead", "str i64 bool bool bytes i64?", 1, 5},
    {11, "GetStreamSegmentInfo", "i64 str str", 0, 0},
    {12, "StreamSegmentInfo", "i64 str bool bool bool i64 i64 i64?", 1, 0},
    {20, "CreateSegment", "i64 str i32 i8 str i64?", 0, 0},
    {21, "SegmentCreated", "i64 str", 1, 0},
    {28, "SealSegment", "i64 str str", 0, 0},
    {29, "SegmentSealed", "i64 str", 1, 0},
    {30, "DeleteSegment", "i64 str str", 0, 0},
    {31, "SegmentDeleted", "i64 str", 1, 0},
    {32, "UpdateSegmentPolicy", "i64 str i32 i8 str", 0, 0},
    {33, "SegmentPolicyUpdated", "i64 str", 1, 0},
    {34, "GetSegmentAttribute", "i64 str uuid str", 0, 0},
    {35, "SegmentAttribute", "i64 i64", 1, 0},
    {36, "UpdateSegmentAttribute", "i64 str uuid i64 i64 str", 0, 0},
    {37, "SegmentAttributeUpdated", "i64 bool", 1, 0},
    {38, "TruncateSegment", "i64 str i64 str", 0, 0},
    {39, "SegmentTruncated", "i64 str", 1, 0},
    {40, "CreateTransientSegment", "i64 uuid str str", 0, 0},
    {41, "LocateOffset", "i64 str i64 str", 0, 0},
    {42, "OffsetLocated", "i64 str i64", 1, 0},
    {50, "WrongHost", "i64 str str str?", 1, 0},
    {51, "SegmentIsSealed", "i64 str str? i64?", 1, 0},
    {52, "SegmentAlreadyExists", "i64 str str?", 1, 0},
    {53, "NoSuchSegment", "i64 str str? i64?", 1, 0},
    {55, "InvalidEventNumber", "uuid i64 str? i64?", 1, 1},
    {56, "SegmentIsTruncated", "i64 str i64 str? i64?", 1, 0},
    {57, "OperationUnsupported", "i64 str str?", 1, 0},
    {58, "MergeSegments", "i64 str str str caus?", 0, 0},
    {59, "SegmentsMerged", "i64 str str i64+", 1, 0},
    {60, "AuthTokenCheckFailed", "i64 str? i32?", 1, 0},
    {61, "ErrorMessage", "i64 str str i32", 1, 0},
    {68, "GetTableSegmentInfo", "i64 str str", 0, 0},
    {69, "TableSegmentInfo", "i64 str i64 i64 i64 i32", 1, 0},
    {70, "CreateTableSegment", "i64 str str bool? i32? i64?", 0, 0},
    {71, "DeleteTableSegment", "i64 str bool str", 0, 0},
    {74, "UpdateTableEntries", "i64 str str entries i64+", 0, 0},
    {75, "TableEntriesUpdated", "i64 longs", 1, 0},
    {76, "RemoveTableKeys", "i64 str str keys i64+", 0, 0},
    {77, "TableKeysRemoved", "i64 str", 1, 0},
    {78, "ReadTable", "i64 str str keys", 0, 0},
    {79, "TableRead", "i64 str entries", 1, 0},
    {80, "TableSegmentNotEmpty", "i64 str str", 1, 0},
    {81, "TableKeyDoesNotExist", "i64 str str", 1, 0},
    {82, "TableKeyBadVersion", "i64 str str", 1, 0},
    {83, "ReadTableKeys", "i64 str str i32 itargs", 0, 0},
    {84, "TableKeysRead", "i64 str keys bytes", 1, 0},
    {85, "ReadTableEntries", "i64 str str i32 itargs", 0, 0},
    {86, "TableEntriesRead", "i64 str entries bytes", 1, 0},
    {87, "TableEntriesDeltaRead", "i64 str entries bool bool i64", 1, 0},
    {88, "ReadTableEntriesDelta", "i64 str str i64 i32", 0, 0},
    {89, "ConditionalBlockEnd", "uuid i64 i64 bytes i64", 0, 4},
    {90, "MergeSegmentsBatch", "i64 str strs str", 0, 0},
    {91, "SegmentsBatchMerged", "i64 str pairs", 1, 0},
    {100, "KeepAlive", "", 0, -1},
};
#define NCMDS (sizeof CMDS / sizeof CMDS[0])

enum kind { K_I8, K_BOOL, K_I32, K_I64, K_UUID, K_I64O, K_I32O, K_BOOLO, K_I64P, K_STR, K_STRO,
            K_BYTES, K_TAIL, K_LONGS, K_STRS, K_ENTRIES, K_KEYS, K_ITARGS, K_CAUS, K_CAUSO,
            K_CHUNKS, K_PAIRS, K_EVENT, K_PADDING };
static const char *const KIND_NAMES[] = {
    "i8", "bool", "i32", "i64", "uuid", "i64?", "i32?", "bool?", "i64+", "str", "str?", "bytes",
    "tail", "longs", "strs", "entries", "keys", "itargs", "caus", "caus?", "chunks", "pairs",
    "event", "padding"};
static uint8_t kinds[NCMDS][MAXF], nkinds[NCMDS];
static int16_t by_type[256]; /* type code + 128 -> index in CMDS, -1: unknown */

enum { T_HELLO = -127, T_SETUP = 1, T_BLOCK_END = 4, T_READ = 9, T_INFO = 11, T_CREATE = 20,
       T_COND_END = 89, T_KEEPALIVE = 100 };

static void compile_table(void) {
    memset(by_type, -1, sizeof by_type);
    for (size_t i = 0; i < NCMDS; i++) {
        by_type[CMDS[i].type + 128] = (int16_t)i;
        char spec[128];
        snprintf(spec, sizeof spec, "%s", CMDS[i].spec);
        for (char *save = NULL, *w = strtok_r(spec, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
            size_t k = 0;
            while (strcmp(KIND_NAMES[k], w) != 0) k++;
            kinds[i][nkinds[i]++] = (uint8_t)k;
        }
    }
}

static int64_t rd64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return (int64_t)v;
}
static int32_t rd32(const uint8_t *p) { return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]); }
static uint8_t *wr64(uint8_t *p, int64_t v) {
    for (int i = 7; i >= 0; i--) p[i] = (uint8_t)v, v = (int64_t)((uint64_t)v >> 8);
    return p + 8;
}
static uint8_t *wr32(uint8_t *p, int32_t v) {
    uint32_t x = (uint32_t)v;
    p[0] = (uint8_t)(x >> 24), p[1] = (uint8_t)(x >> 16), p[2] = (uint8_t)(x >> 8), p[3] = (uint8_t)x;
    return p + 4;
}

/* ---- strings: Java writeUTF, decoded as primitives.decode_str_body decodes ---- */
/* The next UTF-16 unit(s) of s[*i..n): 1 or 2 units, or -1 when malformed. */
static int next_units(const uint8_t *s, size_t n, size_t *i, uint16_t u[2]) {
    uint8_t b = s[*i];
    if (b < 0x80) { u[0] = b; *i += 1; return 1; }
    if ((b & 0xE0) == 0xC0) {
        if (*i + 1 >= n || (s[*i + 1] & 0xC0) != 0x80) return -1;
        u[0] = (uint16_t)((b & 0x1F) << 6 | (s[*i + 1] & 0x3F)); *i += 2; return 1;
    }
    if ((b & 0xF0) == 0xE0) {
        if (*i + 2 >= n || (s[*i + 1] & 0xC0) != 0x80 || (s[*i + 2] & 0xC0) != 0x80) return -1;
        u[0] = (uint16_t)((b & 0x0F) << 12 | (s[*i + 1] & 0x3F) << 6 | (s[*i + 2] & 0x3F));
        *i += 3; return 1;
    }
    if ((b & 0xF8) == 0xF0) {
        if (*i + 3 >= n) return -1;
        for (int k = 1; k <= 3; k++) if ((s[*i + k] & 0xC0) != 0x80) return -1;
        uint32_t cp = (uint32_t)(b & 7) << 18 | (uint32_t)(s[*i + 1] & 0x3F) << 12 |
                      (uint32_t)(s[*i + 2] & 0x3F) << 6 | (s[*i + 3] & 0x3F);
        if (cp < 0x10000 || cp > 0x10FFFF) return -1;
        cp -= 0x10000;
        u[0] = (uint16_t)(0xD800 | cp >> 10); u[1] = (uint16_t)(0xDC00 | (cp & 0x3FF));
        *i += 4; return 2;
    }
    return -1;
}

static bool str_ok(const uint8_t *s, size_t n) {
    uint16_t u[2];
    for (size_t i = 0; i < n;) if (next_units(s, n, &i, u) < 0) return false;
    return true;
}

/* A decoded name: its canonical bytes (what encode_str writes for it, without the u16
 * prefix) and, when it is not a valid segment name, name_problem's text. */
static uint8_t canon_buf[6 * 65536];
struct name { const uint8_t *b; size_t n; char problem[96]; };

static uint16_t unit_buf[65536];

static void decode_name(const uint8_t *s, size_t n, struct name *out) {
    size_t nu = 0, o = 0;
    for (size_t i = 0; i < n;) nu += (size_t)next_units(s, n, &i, unit_buf + nu); /* validated */
    int control = -1;
    size_t control_at = 0, cp = 0;
    for (size_t j = 0; j < nu; j++, cp++) {
        uint16_t c = unit_buf[j];
        if (c >= 0xD800 && c <= 0xDBFF && j + 1 < nu && unit_buf[j + 1] >= 0xDC00 && unit_buf[j + 1] <= 0xDFFF) {
            for (int k = 0; k < 2; k++) {
                uint16_t h = unit_buf[j + (size_t)k];
                canon_buf[o++] = (uint8_t)(0xE0 | h >> 12), canon_buf[o++] = (uint8_t)(0x80 | (h >> 6 & 0x3F));
                canon_buf[o++] = (uint8_t)(0x80 | (h & 0x3F));
            }
            j++; /* one code point, two units */
            continue;
        }
        if (control < 0 && (c < 0x20 || c == 0x7F)) control = c, control_at = cp;
        if (c > 0 && c < 0x80) canon_buf[o++] = (uint8_t)c;
        else if (c < 0x800) canon_buf[o++] = (uint8_t)(0xC0 | c >> 6), canon_buf[o++] = (uint8_t)(0x80 | (c & 0x3F));
        else canon_buf[o++] = (uint8_t)(0xE0 | c >> 12), canon_buf[o++] = (uint8_t)(0x80 | (c >> 6 & 0x3F)), canon_buf[o++] = (uint8_t)(0x80 | (c & 0x3F));
    }
    out->b = canon_buf, out->n = o, out->problem[0] = 0;
    if (nu == 0) snprintf(out->problem, sizeof out->problem, "a segment name cannot be empty");
    else if (control >= 0) snprintf(out->problem, sizeof out->problem, "control character U+%04X at position %zu", (unsigned)control, control_at);
    else if (o > MAX_NAME_BYTES) snprintf(out->problem, sizeof out->problem, "the name is longer than %d bytes on the wire", MAX_NAME_BYTES);
}

/* ---- frame validation: FrameDecoder's checks, field by field ---- */
struct fields { size_t off[MAXF]; bool present[MAXF]; };

static bool need(size_t p, size_t k, size_t end) { return p <= end && end - p >= k; }

static bool read_str(const uint8_t *b, size_t *p, size_t end) {
    if (!need(*p, 2, end)) return false;
    size_t n = (size_t)b[*p] << 8 | b[*p + 1];
    if (!need(*p + 2, n, end) || !str_ok(b + *p + 2, n)) return false;
    *p += 2 + n;
    return true;
}
static bool read_span(const uint8_t *b, size_t *p, size_t end) { /* i32 length + bytes */
    if (!need(*p, 4, end)) return false;
    int32_t n = rd32(b + *p);
    if (n < 0 || !need(*p + 4, (size_t)n, end)) return false;
    *p += 4 + (size_t)n;
    return true;
}
static bool count(const uint8_t *b, size_t *p, size_t end, size_t min_item, int32_t *n) {
    if (!need(*p, 4, end)) return false;
    *n = rd32(b + *p);
    *p += 4;
    return *n >= 0 && (uint64_t)*n * min_item <= end - *p;
}
static bool read_key(const uint8_t *b, size_t *p, size_t end) {
    if (!need(*p, 8, end)) return false;
    int32_t size = rd32(b + *p), n = rd32(b + *p + 4);
    if (size < 0 || (n != 0 && (int64_t)size > (int64_t)(end - *p) - 4)) return false;
    *p += 8;
    if (n == 0) return true;
    if (n < 0 || !need(*p, (size_t)n, end)) return false;
    *p += (size_t)n;
    if (!need(*p, 8, end)) return false;
    *p += 8;
    return true;
}
static bool read_value(const uint8_t *b, size_t *p, size_t end) {
    if (!need(*p, 8, end)) return false;
    int32_t size = rd32(b + *p), n = rd32(b + *p + 4);
    if (size < 0 || (int64_t)size > (int64_t)(end - *p) - 4) return false;
    *p += 8;
    if (n == 0) return true;
    if (n < 0 || !need(*p, (size_t)n, end)) return false;
    *p += (size_t)n;
    return true;
}

static bool field(int k, const uint8_t *b, size_t *p, size_t end, bool *present) {
    static const uint8_t size[] = {[K_I8] = 1, [K_BOOL] = 1, [K_I32] = 4, [K_I64] = 8, [K_UUID] = 16,
                                   [K_I64O] = 8, [K_I32O] = 4, [K_BOOLO] = 1};
    int32_t n;
    *present = true;
    switch (k) {
    case K_I8: case K_BOOL: case K_I32: case K_I64: case K_UUID:
        if (!need(*p, size[k], end)) return false;
        *p += size[k];
        return true;
    case K_I64O: case K_I32O: case K_BOOLO:
        if (end - *p >= size[k]) *p += size[k];
        else *present = false;
        return true;
    case K_I64P:
        if (end == *p) { *present = false; return true; }
        if (!need(*p, 8, end)) return false;
        *p += 8;
        return true;
    case K_STRO:
        if (end == *p) { *present = false; return true; }
        return read_str(b, p, end);
    case K_STR: return read_str(b, p, end);
    case K_BYTES: return read_span(b, p, end);
    case K_TAIL: case K_PADDING: *p = end; return true;
    case K_LONGS:
        if (!count(b, p, end, 8, &n)) return false;
        *p += 8 * (size_t)n;
        return true;
    case K_STRS:
        if (!count(b, p, end, 2, &n)) return false;
        for (int32_t i = 0; i < n; i++) if (!read_str(b, p, end)) return false;
        return true;
    case K_KEYS: case K_ENTRIES:
        if (!count(b, p, end, k == K_KEYS ? 8 : 16, &n)) return false;
        for (int32_t i = 0; i < n; i++)
            if (!read_key(b, p, end) || (k == K_ENTRIES && !read_value(b, p, end))) return false;
        return true;
    case K_ITARGS:
        for (int i = 0; i < 4; i++) if (end - *p >= 4 && !read_span(b, p, end)) return false;
        return true;
    case K_CAUSO:
        if (end == *p) { *present = false; return true; }
        /* fall through */
    case K_CAUS:
        if (!count(b, p, end, 33, &n)) return false;
        *p += 33 * (size_t)n;
        return true;
    case K_CHUNKS:
        if (!count(b, p, end, 27, &n)) return false;
        for (int32_t i = 0; i < n; i++) {
            if (!need(*p, 24, end)) return false;
            *p += 24;
            if (!read_str(b, p, end) || !need(*p, 1, end)) return false;
            *p += 1;
        }
        return true;
    case K_PAIRS:
        if (!count(b, p, end, 10, &n)) return false;
        for (int32_t i = 0; i < n; i++) {
            if (!read_str(b, p, end) || !need(*p, 8, end)) return false;
            *p += 8;
        }
        return true;
    case K_EVENT:
        if (!need(*p, 8, end) || rd32(b + *p) != 0) return false;
        n = rd32(b + *p + 4);
        *p += 8;
        if (n < 0 || !need(*p, (size_t)n, end)) return false;
        *p += (size_t)n;
        return true;
    }
    return false;
}

/* Check one payload against command ci's fields; record where each field starts. */
static bool parse(size_t ci, const uint8_t *b, size_t len, struct fields *f) {
    size_t p = 0;
    for (int i = 0; i < nkinds[ci]; i++) {
        f->off[i] = p;
        if (!field(kinds[ci][i], b, &p, len, &f->present[i])) return false;
    }
    return true;
}

