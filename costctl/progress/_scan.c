/* costctl.progress._scan: the native block scanner behind costctl.progress.lines (ENGINE "native").
 *
 * scan() reads complete lines of raw UTF-8 bytes (no decoding) and reads the strict whole-line
 * shapes of lines._BLOCK_RE in place (and "step N loss: X"): HF Trainer dict, nanoGPT iter, tqdm loss postfix, Keras,
 * nanoGPT eval, bare "loss: x", "Epoch k/N" header. Every other line holding a candidate
 * literal (oss/OSS/poch/POCH) is handed back, decoded (errors="replace"), to the Python
 * per-line parser. merge() builds the batch columns from the strict points and the points the
 * Python side read from the handed-back lines. Numbers convert as Python's float() (strtod_l in
 * the "C" locale, correctly rounded; the shapes admit only [-]digits[.digits][e[+-]digits], so
 * nan/inf never reach it; overflow gives +-inf as float('1e400')), integers as int() (at most
 * 18 digits: always in int64). Every read is bounded by the line's end; the GIL is released
 * while a block is scanned (the input buffer is held through the buffer protocol).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __APPLE__
#include <xlocale.h>
#endif

#define NO_INT (-1)

typedef struct {
    double value;
    double epoch;
    int64_t step;
    int64_t total;
    int64_t code; /* 0 ("train","loss"), 1 ("eval","val_loss"), 2 ("eval","val loss") */
} point_t;

typedef struct {
    int64_t k;     /* strict points before the line */
    int64_t start; /* byte offsets of the line in the block */
    int64_t end;
    int64_t hn;    /* the last strict "Epoch k/N" header before it in this call, -1 none */
    int64_t ht;
} hand_t;

typedef struct {
    void *p;
    size_t len, cap, item;
} vec_t;

static locale_t c_locale;

static void *vec_push(vec_t *v) {
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 1024;
        void *q = realloc(v->p, cap * v->item);
        if (q == NULL)
            return NULL;
        v->p = q;
        v->cap = cap;
    }
    return (char *)v->p + (v->len++) * v->item;
}

/* A run of 1..max ASCII digits at p (p < e), followed by a non-digit: its length; else 0. */
static size_t digits(const char *p, const char *e, size_t max) {
    size_t n = 0;
    while (p + n < e && p[n] >= '0' && p[n] <= '9') {
        if (++n > max)
            return 0;
    }
    return n;
}

/* The literal s (length n) at p: p + n, else NULL. */
static const char *lit(const char *p, const char *e, const char *s, size_t n) {
    if (p == NULL || (size_t)(e - p) < n || memcmp(p, s, n) != 0)
        return NULL;
    return p + n;
}
#define LIT(p, e, s) lit((p), (e), (s), sizeof(s) - 1)

/* lines._B: -?\d{1,30}+(?:\.\d{1,30}+)?+(?:e[-+]?\d{1,4}+)?+ (greedy, no backtracking: what
 * follows a number in every shape starts with none of [0-9.e]). The end, or NULL. */
static const char *number(const char *p, const char *e) {
    size_t n;
    if (p == NULL)
        return NULL;
    if (p < e && *p == '-')
        p++;
    if ((n = digits(p, e, 30)) == 0)
        return NULL;
    p += n;
    if (p < e && *p == '.' && (n = digits(p + 1, e, 30)) != 0)
        p += 1 + n;
    if (p < e && *p == 'e') {
        const char *q = p + 1;
        if (q < e && (*q == '-' || *q == '+'))
            q++;
        if ((n = digits(q, e, 4)) != 0)
            p = q + n;
    }
    return p;
}

/* Exact powers of ten as doubles (10^22 is the largest: 5^22 < 2^53). */
static const double pow10_exact[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* float() of the number text [p, q) (at most 68 characters by construction): the text is
 * -?digits(.digits)?(e[-+]?digits)?. With at most 15 digits the digits are an exact integer m
 * (< 2^53) and with a decimal exponent |k| <= 22, 10^|k| is exact too, so m * 10^k or
 * m / 10^-k is one correctly rounded IEEE operation (Clinger's fast path, the one CPython's
 * dtoa takes first); any other text goes to strtod_l (correctly rounded in glibc). */
static double to_double(const char *p, const char *q) {
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    {
        const char *c = p;
        int neg = 0, digits_seen = 0, k = 0;
        uint64_t m = 0;
        if (c < q && *c == '-') {
            neg = 1;
            c++;
        }
        for (; c < q && *c >= '0' && *c <= '9'; c++, digits_seen++)
            m = m * 10 + (uint64_t)(*c - '0');
        if (c < q && *c == '.')
            for (c++; c < q && *c >= '0' && *c <= '9'; c++, digits_seen++, k--)
                m = m * 10 + (uint64_t)(*c - '0');
        if (digits_seen <= 15) {
            int ok = 1;
            if (c < q && *c == 'e') {
                int esign = 1, ev = 0, en = 0;
                c++;
                if (c < q && (*c == '-' || *c == '+'))
                    esign = *c++ == '-' ? -1 : 1;
                for (; c < q && *c >= '0' && *c <= '9' && en < 5; c++, en++)
                    ev = ev * 10 + (*c - '0');
                k += esign * ev;
            }
            if (c != q)
                ok = 0; /* cannot happen: number() checked the text */
            if (ok && (m == 0 || (k >= -22 && k <= 22))) {
                double v = (double)m;
                if (m != 0)
                    v = k >= 0 ? v * pow10_exact[k] : v / pow10_exact[-k];
                return neg ? -v : v;
            }
        }
    }
#endif
    char tmp[80];
    size_t n = (size_t)(q - p);
    if (n >= sizeof tmp)
        n = sizeof tmp - 1; /* cannot happen: number() bounds the text */
    memcpy(tmp, p, n);
    tmp[n] = '\0';
    return strtod_l(tmp, NULL, c_locale);
}

/* int() of 1..18 digits [p, q). */
static int64_t to_int(const char *p, const char *q) {
    int64_t v = 0;
    for (; p < q; p++)
        v = v * 10 + (*p - '0');
    return v;
}

/* \d{1,max}+ at p, storing its span: the end, or NULL. */
static const char *int_field(const char *p, const char *e, size_t max, const char **a) {
    size_t n;
    if (p == NULL || (n = digits(p, e, max)) == 0)
        return NULL;
    *a = p;
    return p + n;
}

/* \d{1,max}+(?:\.\d{1,max}+)?+ at p: the end, or NULL. */
static const char *decimal(const char *p, const char *e, size_t max) {
    size_t n;
    if (p == NULL || (n = digits(p, e, max)) == 0)
        return NULL;
    p += n;
    if (p < e && *p == '.' && (n = digits(p + 1, e, max)) != 0)
        p += 1 + n;
    return p;
}

typedef struct {
    const char *buf;
    size_t len;
    size_t pos;
    size_t max_line;
    double ctx;
    int64_t ctx_total;
    int64_t hn, ht; /* last strict header in this call, -1 none */
    int64_t first[3];
    int64_t line_ends; /* "\n" and "\r" passed, a "\r\n" pair once */
    int stopped;
    int nomem;
    vec_t points, hands;
} scan_t;

static int emit(scan_t *s, int64_t code, double value, int64_t step, double epoch, int64_t total) {
    point_t *pt = vec_push(&s->points);
    if (pt == NULL) {
        s->nomem = 1;
        return -1;
    }
    if (s->first[code] < 0)
        s->first[code] = (int64_t)(s->points.len - 1);
    pt->code = code;
    pt->value = value;
    pt->step = step;
    pt->epoch = epoch;
    pt->total = total;
    return 0;
}

/* {'loss': (B), 'grad_norm': B, 'learning_rate': B, 'epoch': (B)} */
static int try_hf(scan_t *s, const char *p, const char *e) {
    const char *v, *ve, *ep, *epe;
    v = LIT(p, e, "{'loss': ");
    ve = number(v, e);
    p = number(LIT(ve, e, ", 'grad_norm': "), e);
    p = number(LIT(p, e, ", 'learning_rate': "), e);
    ep = LIT(p, e, ", 'epoch': ");
    epe = number(ep, e);
    p = LIT(epe, e, "}");
    if (p != e)
        return 0;
    double value = to_double(v, ve), epoch = to_double(ep, epe);
    if (!isfinite(epoch))
        emit(s, 0, value, NO_INT, s->ctx, s->ctx_total);
    else
        emit(s, 0, value, NO_INT, epoch, NO_INT);
    return 1;
}

/* iter (\d{1,18}): loss (\d{1,30}\.\d{1,30}), time \d{1,18}(\.\d{1,18})?ms, mfu -?\d{1,18}(\.\d{1,18})?% */
static int try_iter(scan_t *s, const char *p, const char *e) {
    const char *n = NULL, *ne, *v, *ve;
    size_t k;
    ne = int_field(LIT(p, e, "iter "), e, 18, &n);
    v = LIT(ne, e, ": loss ");
    if (v == NULL || (k = digits(v, e, 30)) == 0)
        return 0;
    ve = v + k;
    if (ve >= e || *ve != '.' || (k = digits(ve + 1, e, 30)) == 0)
        return 0;
    ve += 1 + k;
    p = decimal(LIT(ve, e, ", time "), e, 18);
    p = LIT(p, e, "ms, mfu ");
    if (p != NULL && p < e && *p == '-')
        p++;
    p = LIT(decimal(p, e, 18), e, "%");
    if (p != e)
        return 0;
    emit(s, 0, to_double(v, ve), to_int(n, ne), s->ctx, NO_INT);
    return 1;
}

/*  {0,8}\d{1,3}%\|[# ]{0,100}\| (\d{1,18})/(\d{1,18}) \[\d{1,4}(:\d{1,4}){0,2}<[\d:?]{1,12},
 * \d{1,9}(\.\d{1,9})?(it/s|s/it), loss=(B)\] */
static int try_tqdm(scan_t *s, const char *p, const char *e) {
    const char *n = NULL, *ne, *t = NULL, *te, *v, *ve;
    size_t k = 0;
    int i;
    while (p + k < e && p[k] == ' ' && k <= 8)
        k++;
    if (k > 8)
        return 0;
    p += k;
    if ((k = digits(p, e, 3)) == 0)
        return 0;
    p = LIT(p + k, e, "%|");
    if (p == NULL)
        return 0;
    for (k = 0; p + k < e && (p[k] == '#' || p[k] == ' ') && k <= 100; k++)
        ;
    if (k > 100)
        return 0;
    ne = int_field(LIT(p + k, e, "| "), e, 18, &n);
    te = int_field(LIT(ne, e, "/"), e, 18, &t);
    p = LIT(te, e, " [");
    if (p == NULL || (k = digits(p, e, 4)) == 0)
        return 0;
    p += k;
    for (i = 0; i < 2 && p < e && *p == ':' && (k = digits(p + 1, e, 4)) != 0; i++)
        p += 1 + k;
    p = LIT(p, e, "<");
    if (p == NULL)
        return 0;
    for (k = 0; p + k < e && ((p[k] >= '0' && p[k] <= '9') || p[k] == ':' || p[k] == '?') && k <= 12; k++)
        ;
    if (k == 0 || k > 12)
        return 0;
    p = decimal(LIT(p + k, e, ", "), e, 9);
    if (p == NULL)
        return 0;
    if (LIT(p, e, "it/s") != NULL)
        p += 4;
    else if (LIT(p, e, "s/it") != NULL)
        p += 4;
    else
        return 0;
    v = LIT(p, e, ", loss=");
    ve = number(v, e);
    p = LIT(ve, e, "]");
    if (p != e)
        return 0;
    emit(s, 0, to_double(v, ve), to_int(n, ne), s->ctx, to_int(t, te));
    return 1;
}

/* \d{1,18}/\d{1,18} \[[=>.]{0,200}\] - \d{1,9}s( \d{1,9}[mu]?s/step)? - loss: (B)( - acc: B)?
 * ( - val_loss: (B)( - val_acc: B)?)? */
static int try_keras(scan_t *s, const char *p, const char *e) {
    const char *a = NULL, *q, *v, *ve, *kv = NULL, *kve = NULL;
    size_t k;
    p = int_field(p, e, 18, &a);
    p = int_field(LIT(p, e, "/"), e, 18, &a);
    p = LIT(p, e, " [");
    if (p == NULL)
        return 0;
    for (k = 0; p + k < e && (p[k] == '=' || p[k] == '>' || p[k] == '.') && k <= 200; k++)
        ;
    if (k > 200)
        return 0;
    p = LIT(p + k, e, "] - ");
    if (p == NULL || (k = digits(p, e, 9)) == 0)
        return 0;
    p = LIT(p + k, e, "s");
    if (p == NULL)
        return 0;
    q = LIT(p, e, " "); /* ( \d{1,9}[mu]?s/step)? */
    if (q != NULL && (k = digits(q, e, 9)) != 0) {
        q += k;
        if (q < e && (*q == 'm' || *q == 'u'))
            q++;
        q = LIT(q, e, "s/step");
        if (q != NULL)
            p = q;
    }
    v = LIT(p, e, " - loss: ");
    ve = number(v, e);
    if (ve == NULL)
        return 0;
    p = ve;
    q = number(LIT(p, e, " - acc: "), e);
    if (q != NULL)
        p = q;
    kv = LIT(p, e, " - val_loss: ");
    kve = number(kv, e);
    if (kve != NULL) {
        p = kve;
        q = number(LIT(p, e, " - val_acc: "), e);
        if (q != NULL)
            p = q;
    }
    if (p != e)
        return 0;
    emit(s, 0, to_double(v, ve), NO_INT, s->ctx, s->ctx_total);
    if (kve != NULL)
        emit(s, 1, to_double(kv, kve), NO_INT, s->ctx, s->ctx_total);
    return 1;
}

/* step (\d{1,18}): train loss B, val loss (B) */
static int try_eval(scan_t *s, const char *p, const char *e) {
    const char *n = NULL, *ne, *v, *ve;
    ne = int_field(LIT(p, e, "step "), e, 18, &n);
    p = number(LIT(ne, e, ": train loss "), e);
    v = LIT(p, e, ", val loss ");
    ve = number(v, e);
    if (ve != e)
        return 0;
    emit(s, 2, to_double(v, ve), to_int(n, ne), s->ctx, NO_INT);
    return 1;
}

/* step (\d{1,18}) loss: (B) -> train "loss", step (a custom loop's commonest line) */
static int try_step_loss(scan_t *s, const char *p, const char *e) {
    const char *n = NULL, *ne, *v, *ve;
    ne = int_field(LIT(p, e, "step "), e, 18, &n);
    v = LIT(ne, e, " loss: ");
    ve = number(v, e);
    if (ve != e)
        return 0;
    emit(s, 0, to_double(v, ve), to_int(n, ne), s->ctx, NO_INT);
    return 1;
}

/* loss(: ?|=)(B) */
static int try_bare(scan_t *s, const char *p, const char *e) {
    const char *v = LIT(p, e, "loss"), *ve;
    if (v == NULL || v >= e)
        return 0;
    if (*v == ':') {
        v++;
        if (v < e && *v == ' ')
            v++;
    } else if (*v == '=')
        v++;
    else
        return 0;
    ve = number(v, e);
    if (ve != e)
        return 0;
    emit(s, 0, to_double(v, ve), NO_INT, s->ctx, s->ctx_total);
    return 1;
}

/* Epoch (\d{1,18})/(\d{1,18}) */
static int try_header(scan_t *s, const char *p, const char *e) {
    const char *n = NULL, *ne, *t = NULL, *te;
    ne = int_field(LIT(p, e, "Epoch "), e, 18, &n);
    te = int_field(LIT(ne, e, "/"), e, 18, &t);
    if (te != e)
        return 0;
    s->hn = to_int(n, ne);
    s->ht = to_int(t, te);
    s->ctx = (double)s->hn;
    s->ctx_total = s->ht;
    return 1;
}

/* Could lines.parse_epoch_header() accept this line (which holds "poch" or "POCH")? Only
 * whitespace, digits, "[]/:", the letters of "epoch" and control characters survive its
 * fullmatch after clean_line(); escapes and non-ASCII bytes are answered yes (conservative). */
static int possible_header(const char *p, const char *e) {
    for (; p < e; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x80 || c == 0x1b)
            return 1;
        if (c < 0x20 || c == 0x7f || c == ' ' || (c >= '0' && c <= '9') || c == '[' || c == ']' || c == '/' || c == ':')
            continue;
        switch (c | 0x20) {
        case 'e': case 'p': case 'o': case 'c': case 'h':
            continue;
        default:
            return 0;
        }
    }
    return 1;
}

/* 1 bit: holds oss/OSS; 2 bit: holds poch/POCH. */
static int literals(const char *p, const char *e) {
    int found = 0;
    for (; p + 3 <= e; p++) {
        switch (*p) {
        case 'o':
            if (p[1] == 's' && p[2] == 's')
                found |= 1;
            break;
        case 'O':
            if (p[1] == 'S' && p[2] == 'S')
                found |= 1;
            break;
        case 'p':
            if (p + 4 <= e && p[1] == 'o' && p[2] == 'c' && p[3] == 'h')
                found |= 2;
            break;
        case 'P':
            if (p + 4 <= e && p[1] == 'O' && p[2] == 'C' && p[3] == 'H')
                found |= 2;
            break;
        default:
            break;
        }
        if (found == 3)
            break;
    }
    return found;
}

static int strict_line(scan_t *s, const char *p, const char *e) {
    switch (*p) {
    case '{':
        return try_hf(s, p, e);
    case 'i':
        return try_iter(s, p, e);
    case 's':
        return try_eval(s, p, e) || try_step_loss(s, p, e);
    case 'l':
        return try_bare(s, p, e);
    case 'E':
        return try_header(s, p, e);
    case ' ':
        return try_tqdm(s, p, e);
    default:
        if (*p >= '0' && *p <= '9')
            return try_tqdm(s, p, e) || try_keras(s, p, e);
        return 0;
    }
}

/* The scan proper (no Python calls: runs without the GIL). */
static void scan_block(scan_t *s) {
    const char *buf = s->buf, *end = buf + s->len;
    const char *p = buf + s->pos;
    const char *nl = NULL, *cr = NULL; /* next "\n" / "\r" at or after p (end: none) */
    while (p < end && !s->nomem) {
        if (nl == NULL || nl < p) {
            nl = memchr(p, '\n', (size_t)(end - p));
            if (nl == NULL)
                nl = end;
        }
        if (cr == NULL || cr < p) {
            cr = memchr(p, '\r', (size_t)(end - p));
            if (cr == NULL)
                cr = end;
        }
        const char *e = nl < cr ? nl : cr;
        const char *line = p;
        p = e + 1; /* past the line end (or past the buffer when none) */
        if (e < end && !(*e == '\n' && e > buf && e[-1] == '\r'))
            s->line_ends++;
        if (e == line)
            continue;
        if (strict_line(s, line, e))
            continue;
        if ((size_t)(e - line) > s->max_line)
            continue; /* longer than MAX_LINE_CHARS whatever its characters */
        int found = literals(line, e);
        if (!found)
            continue;
        hand_t *h = vec_push(&s->hands);
        if (h == NULL) {
            s->nomem = 1;
            break;
        }
        h->k = (int64_t)s->points.len;
        h->start = line - buf;
        h->end = e - buf;
        h->hn = s->hn;
        h->ht = s->ht;
        if ((found & 2) && possible_header(line, e)) {
            s->stopped = 1; /* the Python side may change the epoch context here */
            break;
        }
    }
    s->pos = p < end ? (size_t)(p - buf) : s->len;
}

PyDoc_STRVAR(scan_doc,
"scan(buf, pos, ctx, ctx_total, max_line) -> (next_pos, points, hands, first, header, stopped, line_ends)\n\n"
"Scan the complete lines of ``buf`` (bytes-like, ending with a line end) from byte ``pos``.\n"
"``ctx``/``ctx_total``: the epoch context (float, NaN none; int, -1 none). ``max_line``: lines\n"
"longer (bytes) are skipped. ``points``: bytes of 40-byte records (value d, epoch d, step q,\n"
"total q, code q); ``hands``: list of (k, line str, hn, ht) for the lines the Python parser\n"
"reads (k strict points before it; hn/ht the last strict header before it, -1 none);\n"
"``first``: index of the first point of each code (-1 none); ``header``: (n, total) of the last\n"
"strict header, or None; ``stopped``: the scan stopped after a possible epoch header line;\n"
"``line_ends``: the line ends passed (a CRLF once, also when its \\r lies before ``pos``).");

static PyObject *py_scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, max_line;
    double ctx;
    long long ctx_total;
    PyObject *points = NULL, *hands = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*ndLn", &view, &pos, &ctx, &ctx_total, &max_line))
        return NULL;
    scan_t s;
    memset(&s, 0, sizeof s);
    if (pos < 0 || pos > view.len || max_line < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pos out of range");
        return NULL;
    }
    s.buf = view.buf;
    s.len = (size_t)view.len;
    s.pos = (size_t)pos;
    s.max_line = (size_t)max_line;
    s.ctx = ctx;
    s.ctx_total = ctx_total;
    s.hn = s.ht = -1;
    s.first[0] = s.first[1] = s.first[2] = -1;
    s.points.item = sizeof(point_t);
    s.hands.item = sizeof(hand_t);
    Py_BEGIN_ALLOW_THREADS
    scan_block(&s);
    Py_END_ALLOW_THREADS
    if (s.nomem) {
        PyErr_NoMemory();
        goto done;
    }
    points = PyBytes_FromStringAndSize(s.points.p, (Py_ssize_t)(s.points.len * sizeof(point_t)));
    if (points == NULL)
        goto done;
    hands = PyList_New((Py_ssize_t)s.hands.len);
    if (hands == NULL)
        goto done;
    for (size_t i = 0; i < s.hands.len; i++) {
        hand_t *h = (hand_t *)s.hands.p + i;
        PyObject *line = PyUnicode_DecodeUTF8(s.buf + h->start, (Py_ssize_t)(h->end - h->start), "replace");
        if (line == NULL)
            goto done;
        PyObject *item = Py_BuildValue("(LNLL)", (long long)h->k, line, (long long)h->hn, (long long)h->ht);
        if (item == NULL)
            goto done;
        PyList_SET_ITEM(hands, (Py_ssize_t)i, item);
    }
    PyObject *header;
    if (s.hn >= 0)
        header = Py_BuildValue("(LL)", (long long)s.hn, (long long)s.ht);
    else
        header = Py_NewRef(Py_None);
    if (header == NULL)
        goto done;
    result = Py_BuildValue("(nOO(LLL)NOL)", (Py_ssize_t)s.pos, points, hands, (long long)s.first[0],
                           (long long)s.first[1], (long long)s.first[2], header,
                           s.stopped ? Py_True : Py_False, (long long)s.line_ends);
done:
    Py_XDECREF(points);
    Py_XDECREF(hands);
    free(s.points.p);
    free(s.hands.p);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(merge_doc,
"merge(points, code_map, side_series, side_values, side_steps, side_epochs, side_totals, side_pos)\n"
"-> (series, values, steps, epochs, totals)\n\n"
"Columns (bytes for array('i'), 'd', 'q', 'd', 'q') of the strict ``points`` of scan() with the\n"
"side points inserted: side point j goes before strict point side_pos[j] (non-decreasing).\n"
"``code_map``: the batch's series index for codes 0, 1, 2.");

static PyObject *py_merge(PyObject *self, PyObject *args) {
    Py_buffer pts, ss, sv, sst, se, stt, sp;
    int m0, m1, m2;
    PyObject *out[5] = {NULL, NULL, NULL, NULL, NULL}, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*(iii)y*y*y*y*y*y*", &pts, &m0, &m1, &m2, &ss, &sv, &sst, &se, &stt, &sp))
        return NULL;
    Py_ssize_t n = pts.len / (Py_ssize_t)sizeof(point_t), m = sv.len / 8;
    if (pts.len % (Py_ssize_t)sizeof(point_t) || ss.len != m * 4 || sst.len != m * 8 || se.len != m * 8 ||
        stt.len != m * 8 || sp.len != m * 8) {
        PyErr_SetString(PyExc_ValueError, "merge: column lengths differ");
        goto done;
    }
    int map[3] = {m0, m1, m2};
    const point_t *P = pts.buf;
    const int32_t *S = ss.buf;
    const double *V = sv.buf, *E = se.buf;
    const int64_t *ST = sst.buf, *T = stt.buf, *POS = sp.buf;
    for (Py_ssize_t j = 0; j < m; j++) {
        if (POS[j] < 0 || POS[j] > n || (j && POS[j] < POS[j - 1])) {
            PyErr_SetString(PyExc_ValueError, "merge: side positions out of order");
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (P[i].code < 0 || P[i].code > 2) {
            PyErr_SetString(PyExc_ValueError, "merge: bad code");
            goto done;
        }
    }
    Py_ssize_t total = n + m;
    out[0] = PyBytes_FromStringAndSize(NULL, total * 4);
    for (int c = 1; c < 5; c++)
        if (out[0] != NULL)
            out[c] = PyBytes_FromStringAndSize(NULL, total * 8);
    for (int c = 0; c < 5; c++)
        if (out[c] == NULL)
            goto done;
    int32_t *os = (int32_t *)PyBytes_AS_STRING(out[0]);
    double *ov = (double *)PyBytes_AS_STRING(out[1]), *oe = (double *)PyBytes_AS_STRING(out[3]);
    int64_t *ost = (int64_t *)PyBytes_AS_STRING(out[2]), *ot = (int64_t *)PyBytes_AS_STRING(out[4]);
    Py_ssize_t i = 0, j = 0, o = 0;
    while (o < total) {
        if (j < m && POS[j] <= i) {
            os[o] = S[j];
            ov[o] = V[j];
            ost[o] = ST[j];
            oe[o] = E[j];
            ot[o] = T[j];
            j++;
        } else {
            os[o] = map[P[i].code];
            ov[o] = P[i].value;
            ost[o] = P[i].step;
            oe[o] = P[i].epoch;
            ot[o] = P[i].total;
            i++;
        }
        o++;
    }
    result = Py_BuildValue("(OOOOO)", out[0], out[1], out[2], out[3], out[4]);
done:
    for (int c = 0; c < 5; c++)
        Py_XDECREF(out[c]);
    PyBuffer_Release(&pts);
    PyBuffer_Release(&ss);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&sst);
    PyBuffer_Release(&se);
    PyBuffer_Release(&stt);
    PyBuffer_Release(&sp);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, scan_doc},
    {"merge", py_merge, METH_VARARGS, merge_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "costctl.progress._scan",
    "Native block scanner for costctl.progress.lines (see its docstring).", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    if (c_locale == (locale_t)0) {
        c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
        if (c_locale == (locale_t)0) {
            PyErr_SetString(PyExc_ImportError, "newlocale(C) failed");
            return NULL;
        }
    }
    return PyModule_Create(&module);
}
