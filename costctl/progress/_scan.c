/* costctl.progress._scan: the native block scanner behind costctl.progress.lines (ENGINE "native").
 *
 * scan() reads complete lines of raw UTF-8 bytes (no decoding) and reads the strict whole-line
 * shapes of lines._BLOCK_RE in place (and "step N loss: X"): HF Trainer dict, nanoGPT iter, tqdm loss postfix, Keras,
 * nanoGPT eval, bare "loss: x", "Epoch k/N" header. Every other ASCII line holding "oss"/"OSS"
 * is read with the general grammar of lines._parse_raw (see "The general loss-line grammar"
 * below; scan()'s max_chars argument turns it on); the lines it is not sure of (non-ASCII,
 * possible epoch headers, over-long numbers, integers past int64) are handed back, decoded
 * (errors="replace"), to the Python per-line parser. merge() builds the batch columns from the strict points and the points the
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

/* Whether the number text [p, q) overflows a double (a 400-digit or 1e400 loss): such a
 * literal is no number (lines.parse_value returns None), so the fast shapes decline the line
 * and the general path hands it to Python. number() never takes nan/inf, so any non-finite
 * result here is an overflow. */
static int overflows(const char *p, const char *q) {
    return !isfinite(to_double(p, q));
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

/* ---- The general loss-line grammar (lines._parse_raw) for ASCII candidate lines ----------
 *
 * A candidate line (holding oss/OSS) that no strict shape reads and that is printable after
 * clean_line() is read here with exactly _parse_raw's rules, on a cleaned copy of the line (ANSI
 * escapes and C0 controls but tab removed, as lines._ANSI_RE and lines._CONTROL_TABLE do) and its
 * lower-case twin (ASCII lower() keeps positions; the regexes are IGNORECASE). Each regex is
 * matched by hand: the analysis of its backtracking is written beside each matcher. A line holding
 * a non-ASCII character other than tqdm's bar characters (bar_char(); for others Python's Unicode
 * \d, \s, \w and case folding differ from ASCII's), a number of more
 * than GEN_MAX_NUMBER characters, an integer of more than 18 digits, a step or product past int64
 * (Python ints are unbounded) or more than GEN_MAX_NAMES distinct names is "not sure": handed back
 * to the Python parser. In the cleaned line \s is [ \t] (the other ASCII whitespace are controls,
 * removed), \d [0-9], \w [A-Za-z0-9_]. */

#define GEN_HAND (-1)
#define GEN_MAX_NUMBER 300
#define GEN_MAX_NAMES 1024

typedef struct {
    int kind;          /* 0 train, 1 eval */
    const char *name;  /* in the cleaned line (or a static key) */
    size_t nlen;
    double value;
    int64_t step;      /* NO_INT: none or negative */
    int step_none;     /* the line gave no step (Python's None) */
    double epoch;      /* NaN: none */
    int64_t total;     /* NO_INT: none */
} gpoint_t;

static int is_word(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static int is_ws(unsigned char c) { return c == ' ' || c == '\t'; }
static int is_dig(unsigned char c) { return c >= '0' && c <= '9'; }

/* The one non-ASCII kind of character read here: U+2500-U+259F, box drawing and block elements
 * (tqdm's and rich's bars: "█▌", "━╸"), 3 UTF-8 bytes E2 94-96 xx. They are category So: not
 * \d, \s nor \w in Python's Unicode regexes, no case folding, printable, and no ASCII class
 * of the grammar holds them, so each stands in the cleaned line as the one byte GEN_BAR (which
 * none of the matchers accepts either), keeping the character positions Python sees. */
#define GEN_BAR 0x80
static int bar_char(const char *q, const char *e) {
    const unsigned char *u = (const unsigned char *)q;
    if (e - q < 3 || u[0] != 0xe2 || u[1] < 0x94 || u[1] > 0x96 || u[2] < 0x80 || u[2] > 0xbf)
        return 0;
    return u[1] != 0x96 || u[2] <= 0x9f;
}

/* clean_line() of the line [p, e) (ASCII and bar_char()s) into out, and its lower case into low
 * (room for e - p bytes each): _ANSI_RE's matches
 * removed (re.sub: leftmost, left to right; each alternative matches in one way: CSI's three
 * classes are disjoint, OSC's body stops at its first BEL/ESC), then C0 controls but tab and DEL
 * removed (a filter after the substitution: the same as the two passes). Returns the length.
 * *split is set when a run of removed controls follows one of 0-9 . + - e E and is followed by a
 * kept character: maybe a number written across a control (lines._SPLIT_NUMBER_RE, which the
 * Python parser checks exactly: such a line is handed back to it). */
static size_t gen_clean(const char *p, const char *e, char *out, char *low, int *split) {
    size_t o = 0;
    int after = 0; /* inside a control run that follows a number character */
    *split = 0;
    while (p < e) {
        unsigned char c = (unsigned char)*p;
        if (c == 0x1b && p + 1 < e) {
            unsigned char d = (unsigned char)p[1];
            const char *q = p + 2;
            if (d == '[') { /* \x1b\[[0-?]*[ -/]*[@-~] */
                while (q < e && (unsigned char)*q >= 0x30 && (unsigned char)*q <= 0x3f)
                    q++;
                while (q < e && (unsigned char)*q >= 0x20 && (unsigned char)*q <= 0x2f)
                    q++;
                if (q < e && (unsigned char)*q >= 0x40 && (unsigned char)*q <= 0x7e) {
                    p = q + 1;
                    continue;
                }
                /* '[' is not in the two-byte class: no match here */
            } else {
                if (d == ']') { /* \x1b\][^\x07\x1b]*(?:\x07|\x1b\\) */
                    while (q < e && *q != 0x07 && *q != 0x1b)
                        q++;
                    if (q < e && *q == 0x07) {
                        p = q + 1;
                        continue;
                    }
                    if (q + 1 < e && *q == 0x1b && q[1] == '\\') {
                        p = q + 2;
                        continue;
                    }
                }
                if ((d >= 0x40 && d <= 0x5a) || (d >= 0x5c && d <= 0x5f)) { /* \x1b[@-Z\\-_] */
                    p += 2;
                    continue;
                }
            }
        }
        if (c == 0xe2) { /* a bar_char(): one character no class of the grammar holds */
            low[o] = out[o] = (char)GEN_BAR;
            o++;
            p += 3;
            *split |= after;
            after = 0;
            continue;
        }
        if ((c >= 0x20 && c != 0x7f) || c == '\t') {
            out[o] = (char)c;
            low[o++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
            *split |= after;
            after = 0;
        } else if (!after && o > 0) {
            unsigned char b = (unsigned char)out[o - 1];
            after = is_dig(b) || b == '.' || b == '+' || b == '-' || b == 'e' || b == 'E';
        }
        p++;
    }
    return o;
}

/* low[i:] starts with the lower-case literal s. */
static int at(const char *low, size_t n, size_t i, const char *s, size_t k) {
    if (i + k > n)
        return 0;
    for (size_t j = 0; j < k; j++) /* short literals: a loop beats a memcmp call */
        if (low[i + j] != s[j])
            return 0;
    return 1;
}
#define AT(low, n, i, s) at((low), (n), (i), (s), sizeof(s) - 1)

/* float() of the number text [p, q) (lines._NUMBER's numeric alternative: [-+]?(\d+(\.\d*)?|\.\d+)
 * ([eE][-+]?\d+)?): Clinger's fast path for at most 15 digits and |exponent| <= 22, else
 * strtod_l (correctly rounded, as CPython's dtoa). *ok = 0 past GEN_MAX_NUMBER characters. */
static double gen_double(const char *p, const char *q, int *ok) {
    const char *c = p;
    int neg = 0, nd = 0, k = 0;
    uint64_t m = 0;
    *ok = 1;
    if (c < q && (*c == '-' || *c == '+'))
        neg = *c++ == '-';
    for (; c < q && is_dig(*c); c++, nd++)
        m = m * 10 + (uint64_t)(*c - '0');
    if (c < q && *c == '.')
        for (c++; c < q && is_dig(*c); c++, nd++, k--)
            m = m * 10 + (uint64_t)(*c - '0');
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    if (nd <= 15) {
        int fast = 1;
        if (c < q && (*c == 'e' || *c == 'E')) {
            int esign = 1, ev = 0, en = 0;
            c++;
            if (c < q && (*c == '-' || *c == '+'))
                esign = *c++ == '-' ? -1 : 1;
            for (; c < q && is_dig(*c); c++, en++)
                if (en < 6)
                    ev = ev * 10 + (*c - '0');
            if (en >= 6)
                fast = 0;
            k += esign * ev;
        }
        if (fast && c == q && (m == 0 || (k >= -22 && k <= 22))) {
            double v = (double)m;
            if (m != 0)
                v = k >= 0 ? v * pow10_exact[k] : v / pow10_exact[-k];
            return neg ? -v : v;
        }
    }
#endif
    char tmp[GEN_MAX_NUMBER + 1];
    size_t n = (size_t)(q - p);
    if (n > GEN_MAX_NUMBER) {
        *ok = 0;
        return 0.0;
    }
    memcpy(tmp, p, n);
    tmp[n] = '\0';
    double v = strtod_l(tmp, NULL, c_locale);
    if (isinf(v))
        *ok = 0; /* an overflowing literal is no number: Python's parse_value decides (None) */
    return v;
}

/* lines._VALUE at v: (?:tensor\(\s*)?(?P<value>_NUMBER). _NUMBER is atomic: its group takes the
 * first way it matches (sign, the longest digits[.digits*] or .digits, an exponent when whole;
 * or nan / infinity / inf) and is never shrunk, then (?![A-Za-z0-9_]). "tensor(" is optional
 * and greedy; without it the number would start at 't' and fail, so it is taken when there.
 * Returns the end of the number (its start in *vs), or 0 (no match: value positions are > 0). */
static size_t gen_value(const char *c, const char *low, size_t n, size_t v, size_t *vs) {
    if (AT(low, n, v, "tensor(")) {
        v += 7;
        while (v < n && is_ws(c[v]))
            v++;
    }
    size_t i = v;
    if (i < n && (c[i] == '-' || c[i] == '+'))
        i++;
    if (i < n && is_dig(c[i])) {
        while (i < n && is_dig(c[i]))
            i++;
        if (i < n && c[i] == '.')
            for (i++; i < n && is_dig(c[i]); i++)
                ;
    } else if (i + 1 < n && c[i] == '.' && is_dig(c[i + 1])) {
        for (i++; i < n && is_dig(c[i]); i++)
            ;
    } else {
        if (AT(low, n, i, "nan"))
            i += 3;
        else if (AT(low, n, i, "infinity"))
            i += 8;
        else if (AT(low, n, i, "inf"))
            i += 3;
        else
            return 0;
        if (i < n && is_word(c[i]))
            return 0;
        *vs = v;
        return i;
    }
    if (i < n && (c[i] == 'e' || c[i] == 'E')) {
        size_t j = i + 1;
        if (j < n && (c[j] == '-' || c[j] == '+'))
            j++;
        if (j < n && is_dig(c[j])) {
            while (j < n && is_dig(c[j]))
                j++;
            i = j;
        }
    }
    if (i < n && is_word(c[i]))
        return 0;
    *vs = v;
    return i;
}

/* float() of a _NUMBER text [s, e): nan/inf by name (signed as float() signs them). */
static double gen_number_value(const char *c, const char *low, size_t s, size_t e, int *ok) {
    size_t i = s;
    int neg = 0;
    *ok = 1;
    if (c[i] == '-' || c[i] == '+')
        neg = c[i++] == '-';
    if (low[i] == 'n')
        return neg ? -NAN : NAN;
    if (low[i] == 'i')
        return neg ? -INFINITY : INFINITY;
    return gen_double(c + s, c + e, ok);
}

/* The prefixes of lines._LOSS_RE in its order, and their set: 0 train, 1 eval, 2 dropped. */
static const struct {
    const char *s;
    size_t n;
    int set;
} loss_prefixes[] = {
    {"training", 8, 0}, {"train", 5, 0}, {"total", 5, 0}, {"average", 7, 0}, {"avg", 3, 0},
    {"mean", 4, 0}, {"running", 7, 0}, {"epoch", 5, 0}, {"batch", 5, 0}, {"validation", 10, 1},
    {"valid", 5, 1}, {"val", 3, 1}, {"evaluation", 10, 1}, {"eval", 4, 1}, {"dev", 3, 1},
    {"test", 4, 2}, {"predict", 7, 2},
};

static int is_sep(unsigned char c) { return c == ' ' || c == '_' || c == '/' || c == '.' || c == '-'; }

typedef struct {
    size_t start, name_end, end, vs;
    int set;
} lmatch_t;

/* lines._LOSS_RE.match at s. The name is unique at s: no prefix holds "loss" nor starts with
 * 'l', and of two prefixes one of which starts the other ("train"/"training", "val"/"valid"/
 * "validation", "eval"/"evaluation") only one can be followed by [sep]loss; the optional
 * separator is greedy, then absent. After the name: \s*(?:[:=]\s*|\s+) — with W the blank run,
 * a ':'/'=' after W puts the value after it and its blanks (the other way, value at the ':',
 * fails); else W must be non-empty and the value starts after it. */
static int gen_loss_at(const char *c, const char *low, size_t n, size_t s, lmatch_t *m) {
    size_t a;
    int set = 0;
    if (s > 0 && is_word(c[s - 1]))
        return 0;
    if (AT(low, n, s, "loss")) {
        a = s + 4;
    } else {
        size_t k, cnt = sizeof loss_prefixes / sizeof loss_prefixes[0];
        a = 0;
        for (k = 0; k < cnt; k++) {
            size_t q = s + loss_prefixes[k].n;
            if (loss_prefixes[k].s[0] != low[s] || !at(low, n, s, loss_prefixes[k].s, loss_prefixes[k].n))
                continue;
            if (q < n && is_sep(c[q]) && AT(low, n, q + 1, "loss")) {
                a = q + 5;
            } else if (AT(low, n, q, "loss")) {
                a = q + 4;
            } else
                continue;
            set = loss_prefixes[k].set;
            break;
        }
        if (a == 0)
            return 0;
    }
    if (a < n && is_word(c[a]))
        return 0;
    size_t w = a, v, vs = 0, end;
    while (w < n && is_ws(c[w]))
        w++;
    if (w < n && (c[w] == ':' || c[w] == '=')) {
        v = w + 1;
        while (v < n && is_ws(c[v]))
            v++;
    } else {
        if (w == a)
            return 0;
        v = w;
    }
    end = gen_value(c, low, n, v, &vs);
    if (end == 0)
        return 0;
    m->start = s;
    m->name_end = a;
    m->end = end;
    m->vs = vs;
    m->set = set;
    return 1;
}

/* The next "loss" in low at or after i, or n. */
static size_t find_loss(const char *low, size_t n, size_t i) {
    while (i + 4 <= n) {
        const char *hit = memchr(low + i, 'l', n - 3 - i);
        if (hit == NULL)
            return n;
        i = (size_t)(hit - low);
        if (low[i + 1] == 'o' && low[i + 2] == 's' && low[i + 3] == 's')
            return i;
        i++;
    }
    return n;
}

/* lines._NANOGPT_EVAL_RE.match: \s*step \d+: train loss \S+, val loss  — \S+ then ", " : the
 * run of non-blanks after "train loss " must end with ',' (at least one character before it)
 * and be followed by " val loss ". */
static int gen_nanogpt_eval(const char *c, const char *low, size_t n) {
    size_t i = 0, w;
    while (i < n && is_ws(c[i]))
        i++;
    if (!AT(low, n, i, "step "))
        return 0;
    i += 5;
    if (i >= n || !is_dig(c[i]))
        return 0;
    while (i < n && is_dig(c[i]))
        i++;
    if (!AT(low, n, i, ": train loss "))
        return 0;
    i += 13;
    for (w = i; w < n && !is_ws(c[w]); w++)
        ;
    if (w - i < 2 || c[w - 1] != ',')
        return 0;
    return AT(low, n, w, " val loss ");
}

/* lines._HF_METRICS_BLOCK_RE.fullmatch: " {2}(?:train|eval|test|predict)_\w+\s* = \s*\S+\s*".
 * \w+ stops at the blank run before '=' (which must end with a space), then "= " and one
 * non-blank token between optional blanks. */
static int gen_metrics_block(const char *c, const char *low, size_t n) {
    size_t i = 2, j;
    if (n < 2 || c[0] != ' ' || c[1] != ' ')
        return 0;
    if (AT(low, n, i, "train_"))
        i += 6;
    else if (AT(low, n, i, "eval_") || AT(low, n, i, "test_"))
        i += 5;
    else if (AT(low, n, i, "predict_"))
        i += 8;
    else
        return 0;
    if (i >= n || !is_word(c[i]))
        return 0;
    while (i < n && is_word(c[i]))
        i++;
    j = i;
    while (j < n && is_ws(c[j]))
        j++;
    if (j == i || c[j - 1] != ' ' || j + 1 >= n || c[j] != '=' || c[j + 1] != ' ')
        return 0;
    j += 2;
    while (j < n && is_ws(c[j]))
        j++;
    if (j >= n)
        return 0;
    while (j < n && !is_ws(c[j]))
        j++;
    while (j < n && is_ws(c[j]))
        j++;
    return j == n;
}

/* int() of the digits [p, q): -1 past 18 digits (the caller hands the line back). */
static int64_t gen_int(const char *p, const char *q) {
    if (q - p > 18)
        return -1;
    return to_int(p, q);
}

/* The tail shared by _STEP_RE and _EPOCH_RE after the keyword, at a:
 * \s*(?:[:=#]\s*|\s+)?\[?\s* — the language blanks, one of [:=#] (optional), blanks, '['
 * (optional), blanks; its strings hold no digit, so the number starts at the first digit after
 * the greedy scan of it, or the keyword does not match here. Returns that position or n. */
static size_t gen_connector(const char *c, size_t n, size_t a) {
    while (a < n && is_ws(c[a]))
        a++;
    if (a < n && (c[a] == ':' || c[a] == '=' || c[a] == '#')) {
        a++;
        while (a < n && is_ws(c[a]))
            a++;
    }
    if (a < n && c[a] == '[') {
        a++;
        while (a < n && is_ws(c[a]))
            a++;
    }
    return a < n && is_dig(c[a]) ? a : n;
}

/* _STEP_RE/_EPOCH_RE's optional total (blanks, a slash, blanks, digits) and (?![\d.]) after a
 * number ending at i (not followed by a digit): the total when it is there and not followed by
 * '.' (shrinking its digits leaves a digit next), else none, and then the number itself must not
 * be followed by '.'. Returns 1 with *t0, *t1 the total's digits (t0 == t1: none), 0 no match. */
static int gen_total(const char *c, size_t n, size_t i, size_t *t0, size_t *t1) {
    size_t j = i;
    *t0 = *t1 = 0;
    while (j < n && is_ws(c[j]))
        j++;
    if (j < n && c[j] == '/') {
        j++;
        while (j < n && is_ws(c[j]))
            j++;
        if (j < n && is_dig(c[j])) {
            size_t d = j;
            while (j < n && is_dig(c[j]))
                j++;
            if (j >= n || c[j] != '.') {
                *t0 = d;
                *t1 = j;
                return 1;
            }
        }
    }
    return i >= n || c[i] != '.';
}

/* lines._step_epoch_total: step, epoch and total from the line (None: step_none / NaN / NO_INT).
 * Returns 0, or GEN_HAND (an integer past 18 digits or int64, an over-long epoch number). */
static int gen_step_epoch_total(const char *c, const char *low, size_t n, int64_t *step, int *step_none,
                                double *epoch, int64_t *total) {
    int64_t st = -1, st_total = -1, ep_total = -1;
    int have_step = 0, have_epoch = 0;
    double ep = NAN;
    size_t i;
    /* _STEP_RE.search: (?<!\w)(?:global_step|step|iteration|iter) then the connector, \d+
     * (greedy; shrinking it leaves a digit next), the total. "iteration" failing, "iter" would
     * be followed by 'a': never a match. */
    for (i = 0; i < n && !have_step; i++) {
        size_t a;
        char l = low[i];
        if (l != 'g' && l != 's' && l != 'i')
            continue;
        if (i > 0 && is_word(c[i - 1]))
            continue;
        if (AT(low, n, i, "global_step"))
            a = i + 11;
        else if (AT(low, n, i, "step"))
            a = i + 4;
        else if (AT(low, n, i, "iteration"))
            a = i + 9;
        else if (AT(low, n, i, "iter"))
            a = i + 4;
        else
            continue;
        size_t d0 = gen_connector(c, n, a), d1, t0, t1;
        if (d0 >= n)
            continue;
        for (d1 = d0; d1 < n && is_dig(c[d1]); d1++)
            ;
        if (!gen_total(c, n, d1, &t0, &t1))
            continue;
        if ((st = gen_int(c + d0, c + d1)) < 0)
            return GEN_HAND;
        if (t1 > t0 && (st_total = gen_int(c + t0, c + t1)) < 0)
            return GEN_HAND;
        have_step = 1;
    }
    /* _EPOCH_RE.search: (?<!\w)epoch, the connector, \d+(?:\.\d+)? (the digits, then '.' and
     * digits when there; any shrinking leaves a digit or '.' next), the total. */
    for (i = 0; i + 5 <= n && !have_epoch; i++) {
        if (low[i] != 'e' || !AT(low, n, i, "epoch") || (i > 0 && is_word(c[i - 1])))
            continue;
        size_t d0 = gen_connector(c, n, i + 5), d1, t0, t1;
        if (d0 >= n)
            continue;
        for (d1 = d0; d1 < n && is_dig(c[d1]); d1++)
            ;
        if (d1 + 1 < n && c[d1] == '.' && is_dig(c[d1 + 1]))
            for (d1++; d1 < n && is_dig(c[d1]); d1++)
                ;
        if (!gen_total(c, n, d1, &t0, &t1))
            continue;
        int ok;
        ep = gen_double(c + d0, c + d1, &ok);
        if (!ok)
            return GEN_HAND;
        if (t1 > t0 && (ep_total = gen_int(c + t0, c + t1)) < 0)
            return GEN_HAND;
        have_epoch = 1;
    }
    *step_none = 1;
    *step = NO_INT;
    *epoch = NAN;
    *total = NO_INT;
    if (!have_step) {
        if (!have_epoch && memchr(c, '|', n) != NULL) {
            /* _TQDM_RE.search: \|\s*(\d+)/(\d+)\s*\[[\d?] (digits greedy; shrinking leaves a digit
             * where '/' or '[' is needed) */
            for (i = 0; i < n; i++) {
                if (c[i] != '|')
                    continue;
                size_t j = i + 1, a0, a1, b0, b1;
                while (j < n && is_ws(c[j]))
                    j++;
                for (a0 = a1 = j; a1 < n && is_dig(c[a1]); a1++)
                    ;
                if (a1 == a0 || a1 >= n || c[a1] != '/')
                    continue;
                for (b0 = b1 = a1 + 1; b1 < n && is_dig(c[b1]); b1++)
                    ;
                if (b1 == b0)
                    continue;
                for (j = b1; j < n && is_ws(c[j]); j++)
                    ;
                if (j + 1 >= n || c[j] != '[' || !(is_dig(c[j + 1]) || c[j + 1] == '?'))
                    continue;
                int64_t tn = gen_int(c + a0, c + a1), tt = gen_int(c + b0, c + b1);
                if (tn < 0 || tt < 0)
                    return GEN_HAND;
                *step = tn;
                *step_none = 0;
                *total = tt;
                return 0;
            }
        }
        if (have_epoch) {
            *epoch = ep;
            *total = ep_total; /* -1 when none */
        }
        return 0;
    }
    *step_none = 0;
    if (have_epoch && ep_total > 0 && st_total > 0 && ep >= 1 && st <= st_total) {
        double whole = ep - 1.0;
        int64_t g, t;
        if (!(whole < 9.2e18))
            return GEN_HAND;
        if (__builtin_mul_overflow((int64_t)whole, st_total, &g) || __builtin_add_overflow(g, st, &g) ||
            __builtin_mul_overflow(ep_total, st_total, &t))
            return GEN_HAND;
        *step = g;
        *epoch = ep;
        *total = t;
        return 0;
    }
    *step = st;
    *epoch = have_epoch ? ep : NAN;
    *total = st_total;
    return 0;
}

/* The keys _parse_dict looks at, lower case. */
enum { K_LOSS, K_TRAIN_LOSS, K_TOTAL_LOSS, K_EVAL_LOSS, K_VAL_LOSS, K_VALIDATION_LOSS, K_VALID_LOSS,
       K_EVAL_SLASH, K_VAL_SLASH, K_STEP, K_GLOBAL_STEP, K_ITERATION, K_ITER, K_EPOCH, K_COUNT };
static const char *const dict_keys[K_COUNT] = {
    "loss", "train_loss", "total_loss", "eval_loss", "val_loss", "validation_loss", "valid_loss",
    "eval/loss", "val/loss", "step", "global_step", "iteration", "iter", "epoch",
};

/* lines._parse_dict on the cleaned line: 1 with 1-2 points, 0 no points (the training summary),
 * 2 "None" (no such dict: the caller goes on), GEN_HAND. _DICT_ITEM_RE.finditer from the first
 * '{': at a quote, the key is the run of non-quotes to the next quote (1-80 of them: [^'"] cannot
 * stop early before a quote), then \s*:\s*, the value (gen_value); a failed try resumes at the
 * next quote. items.setdefault: the first value of a key counts. */
static int gen_dict(const char *c, const char *low, size_t n, gpoint_t *pts, int *npts) {
    const char *brace = memchr(c, '{', n);
    size_t i = (size_t)(brace - c);
    int seen[K_COUNT] = {0}, any = 0, k;
    double val[K_COUNT];
    while (i < n) {
        if (c[i] != '\'' && c[i] != '"') {
            i++;
            continue;
        }
        size_t j = i + 1, v, vs = 0, end;
        while (j < n && c[j] != '\'' && c[j] != '"')
            j++;
        if (j >= n)
            break; /* no closing quote: no item from here on */
        if (j - i - 1 < 1 || j - i - 1 > 80) {
            i = j;
            continue;
        }
        v = j + 1;
        while (v < n && is_ws(c[v]))
            v++;
        if (v >= n || c[v] != ':') {
            i = j;
            continue;
        }
        v++;
        while (v < n && is_ws(c[v]))
            v++;
        /* (?P<q>['"]?)value(?P=q): a quoted value (transformers 5 prints '0.695') needs the
         * same quote after it; with none there, no item (an empty q cannot start at a quote) */
        char quote = v < n && (c[v] == '\'' || c[v] == '"') ? c[v] : 0;
        size_t ve = gen_value(c, low, n, quote ? v + 1 : v, &vs);
        end = ve;
        if (ve != 0 && quote)
            end = ve < n && c[ve] == quote ? ve + 1 : 0;
        if (end == 0) {
            i = j;
            continue;
        }
        const char *key = low + i + 1;
        size_t klen = j - i - 1;
        any = 1;
        if (klen >= 13 && memcmp(key, "train", 5) == 0 && memcmp(key + klen - 8, "_runtime", 8) == 0) {
            int rt_ok;
            (void)gen_number_value(c, low, vs, ve, &rt_ok);
            if (!rt_ok)
                return GEN_HAND; /* an overflowing runtime is no number: Python decides */
            return 0; /* the end-of-training summary: not progress */
        }
        for (k = 0; k < K_COUNT; k++) {
            if (!seen[k] && dict_keys[k][0] == key[0] && strlen(dict_keys[k]) == klen && memcmp(dict_keys[k], key, klen) == 0) {
                int ok;
                val[k] = gen_number_value(c, low, vs, ve, &ok);
                if (!ok)
                    return GEN_HAND;
                seen[k] = 1;
                break;
            }
        }
        i = end;
    }
    if (!any)
        return 2;
    int64_t step = NO_INT;
    int step_none = 1;
    for (k = K_STEP; k <= K_ITER; k++) {
        if (seen[k]) {
            double s = val[k];
            if (isfinite(s)) {
                if (!(s < 9.2e18))
                    return GEN_HAND;
                step_none = 0;
                step = s <= -1.0 ? NO_INT : (int64_t)s;
            }
            break;
        }
    }
    double epoch = seen[K_EPOCH] && isfinite(val[K_EPOCH]) ? val[K_EPOCH] : NAN;
    *npts = 0;
    for (int kind = 0; kind < 2; kind++) {
        int from = kind == 0 ? K_LOSS : K_EVAL_LOSS, to = kind == 0 ? K_TOTAL_LOSS : K_VAL_SLASH;
        for (k = from; k <= to; k++) {
            if (seen[k]) {
                gpoint_t *p = &pts[(*npts)++];
                p->kind = kind;
                p->name = dict_keys[k];
                p->nlen = strlen(dict_keys[k]);
                p->value = val[k];
                p->step = step;
                p->step_none = step_none;
                p->epoch = epoch;
                p->total = NO_INT;
                break;
            }
        }
    }
    return *npts ? 1 : 2;
}

/* lines._parse_raw on the cleaned line c (n bytes, low its lower case): the points in pts
 * (0-2, *npts), or GEN_HAND. */
static int gen_parse(const char *c, const char *low, size_t n, gpoint_t *pts, int *npts) {
    *npts = 0;
    const char *brace = memchr(c, '{', n);
    if (brace != NULL) {
        int dict = 0;
        for (const char *b = brace; b != NULL && b < c + n - 1;
             b = memchr(b + 1, '{', (size_t)(c + n - b - 1))) {
            if (b[1] == '\'' || b[1] == '"') {
                dict = 1;
                break;
            }
        }
        if (dict) {
            int r = gen_dict(c, low, n, pts, npts);
            if (r != 2)
                return r;
            *npts = 0;
        }
    }
    if (gen_metrics_block(c, low, n))
        return 0;
    size_t q = find_loss(low, n, 0), done = 0;
    lmatch_t train, eval, m;
    int have_train = 0, have_eval = 0;
    while (q < n && !(have_train && have_eval)) {
        size_t s = q >= done + 11 ? q - 11 : done;
        for (; s <= q; s++) {
            if (gen_loss_at(c, low, n, s, &m)) {
                done = m.end;
                if (m.set == 0 && !have_train) {
                    train = m;
                    have_train = 1;
                } else if (m.set == 1 && !have_eval) {
                    eval = m;
                    have_eval = 1;
                }
                break;
            }
        }
        q = find_loss(low, n, q + 1 > done ? q + 1 : done);
    }
    if (!have_train && !have_eval)
        return 0;
    if (have_train && have_eval && gen_nanogpt_eval(c, low, n))
        have_train = 0;
    int64_t step, total;
    int step_none;
    double epoch;
    if (gen_step_epoch_total(c, low, n, &step, &step_none, &epoch, &total) == GEN_HAND)
        return GEN_HAND;
    for (int kind = 0; kind < 2; kind++) {
        lmatch_t *lm = kind == 0 ? (have_train ? &train : NULL) : (have_eval ? &eval : NULL);
        if (lm == NULL)
            continue;
        int ok;
        gpoint_t *p = &pts[(*npts)++];
        p->kind = kind;
        p->name = c + lm->start;
        p->nlen = lm->name_end - lm->start;
        p->value = gen_number_value(c, low, lm->vs, lm->end, &ok);
        if (!ok)
            return GEN_HAND;
        p->step = step;
        p->step_none = step_none;
        p->epoch = epoch;
        p->total = total;
    }
    return 1;
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
    size_t max_chars;  /* MAX_LINE_CHARS; 0: no general reading (every other line handed back) */
    char *clean, *low; /* scratch for one cleaned line and its lower case (max_chars each) */
    vec_t names;       /* name_t: the series of codes 3, 4, ... */
    vec_t name_text;   /* their names' bytes */
    size_t last_name;  /* the entry found last (lines repeat their names) */
} scan_t;

typedef struct {
    int kind;
    size_t off, len;
    int64_t first; /* index of its first point */
} name_t;

static int emit(scan_t *s, int64_t code, double value, int64_t step, double epoch, int64_t total) {
    point_t *pt = vec_push(&s->points);
    if (pt == NULL) {
        s->nomem = 1;
        return -1;
    }
    if (code < 3) {
        if (s->first[code] < 0)
            s->first[code] = (int64_t)(s->points.len - 1);
    } else {
        name_t *nm = (name_t *)s->names.p + (code - 3);
        if (nm->first < 0)
            nm->first = (int64_t)(s->points.len - 1);
    }
    pt->code = code;
    pt->value = value;
    pt->step = step;
    pt->epoch = epoch;
    pt->total = total;
    return 0;
}

static int possible_header(const char *p, const char *e);

/* The point code of series (kind, name): 0-2 the strict ones, else 3 + its entry in s->names
 * (added when new). -1: more than GEN_MAX_NAMES names (the line is handed back) or no memory. */
static int64_t gen_code(scan_t *s, int kind, const char *name, size_t len) {
    if (kind == 0 && len == 4 && memcmp(name, "loss", 4) == 0)
        return 0;
    if (kind == 1 && len == 8 && memcmp(name, "val_loss", 8) == 0)
        return 1;
    if (kind == 1 && len == 8 && memcmp(name, "val loss", 8) == 0)
        return 2;
    name_t *names = s->names.p;
    const char *text = s->name_text.p;
    if (s->last_name < s->names.len) {
        name_t *nm = &names[s->last_name];
        if (nm->kind == kind && nm->len == len && memcmp(text + nm->off, name, len) == 0)
            return 3 + (int64_t)s->last_name;
    }
    for (size_t i = 0; i < s->names.len; i++) {
        if (names[i].kind == kind && names[i].len == len && memcmp(text + names[i].off, name, len) == 0) {
            s->last_name = i;
            return 3 + (int64_t)i;
        }
    }
    if (s->names.len >= GEN_MAX_NAMES)
        return -1;
    size_t off = s->name_text.len;
    for (size_t i = 0; i < len; i++) {
        char *ch = vec_push(&s->name_text);
        if (ch == NULL) {
            s->nomem = 1;
            return -1;
        }
        *ch = name[i];
    }
    name_t *nm = vec_push(&s->names);
    if (nm == NULL) {
        s->nomem = 1;
        return -1;
    }
    nm->kind = kind;
    nm->off = off;
    nm->len = len;
    nm->first = -1;
    s->last_name = s->names.len - 1;
    return 3 + (int64_t)s->last_name;
}

/* A candidate line [p, e) (holding oss/OSS when found & 1, poch/POCH when found & 2) that no
 * strict shape read, read with the general grammar: 1 done (its points, if any, emitted with the
 * epoch context as LineParser._add applies it), 0 hand it back. ``header``: the raw line may be
 * an epoch header (possible_header); one holding escapes or bar characters is asked again once
 * cleaned (an ANSI-coloured "epoch 2/10 loss: 0.5" is no header), else it is handed back. */
static int general_line(scan_t *s, const char *p, const char *e, int found, int header) {
    size_t n = (size_t)(e - p);
    gpoint_t pts[2];
    int npts = 0, r, esc = 0;
    int64_t codes[2];
    if (!(found & 1) && !header)
        return 1; /* no "oss": _parse_raw reads nothing, and the line is no header */
    size_t chars = n;
    for (const char *q = p; q < e; q++) {
        if ((unsigned char)*q >= 0x80) {
            if (!bar_char(q, e))
                return 0;
            q += 2;
            chars -= 2;
            esc |= 2;
            continue;
        }
        esc |= *q == 0x1b;
    }
    /* esc: 1 an escape, 2 a bar character (which cleaning keeps: then no header fullmatch) */
    if (chars > s->max_chars)
        return 1; /* longer than MAX_LINE_CHARS characters: skipped (no header either) */
    if (header && !esc)
        return 0;
    if (s->clean == NULL) {
        s->clean = malloc(2 * s->max_chars + 2);
        if (s->clean == NULL) {
            s->nomem = 1;
            return 0;
        }
        s->low = s->clean + s->max_chars + 1;
    }
    char *c = s->clean, *low = s->low;
    int split;
    n = gen_clean(p, e, c, low, &split);
    if (split)
        return 0; /* maybe a control inside a number: the Python parser reads (and counts) it */
    if (header && memchr(c, GEN_BAR, n) == NULL && possible_header(c, c + n))
        return 0;
    if (!(found & 1))
        return 1;
    if (find_loss(low, n, 0) >= n)
        return 1; /* "loss" not in low: no point (every key a dict point has holds it too) */
    r = gen_parse(c, low, n, pts, &npts);
    if (r == GEN_HAND)
        return 0;
    for (int i = 0; i < npts; i++) {
        codes[i] = gen_code(s, pts[i].kind, pts[i].name, pts[i].nlen);
        if (codes[i] < 0)
            return 0;
    }
    for (int i = 0; i < npts; i++) {
        double epoch = pts[i].epoch;
        int64_t total = pts[i].total;
        if (isnan(epoch) && !isnan(s->ctx)) {
            if (total == NO_INT && pts[i].step_none)
                total = s->ctx_total;
            epoch = s->ctx;
        }
        if (emit(s, codes[i], pts[i].value, pts[i].step, epoch, total) < 0)
            return 0;
    }
    return 1;
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
    if (!isfinite(value) || !isfinite(epoch))
        return 0; /* an overflowing literal is no number: the general path decides */
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
    if (overflows(v, ve))
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
    if (overflows(v, ve))
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
    if (overflows(v, ve))
        return 0;
    if (kve != NULL && overflows(kv, kve))
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
    if (overflows(v, ve))
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
    if (overflows(v, ve))
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
    if (overflows(v, ve))
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
        int header = (found & 2) && possible_header(line, e);
        if (s->max_chars && general_line(s, line, e, found, header))
            continue;
        if (s->nomem)
            break;
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
        if (header) {
            s->stopped = 1; /* the Python side may change the epoch context here */
            break;
        }
    }
    s->pos = p < end ? (size_t)(p - buf) : s->len;
}

PyDoc_STRVAR(scan_doc,
"scan(buf, pos, ctx, ctx_total, max_line, max_chars=0) -> (next_pos, points, hands, first, header, stopped,\n"
"line_ends, names)\n\n"
"Scan the complete lines of ``buf`` (bytes-like, ending with a line end) from byte ``pos``.\n"
"``ctx``/``ctx_total``: the epoch context (float, NaN none; int, -1 none). ``max_line``: lines\n"
"longer (bytes) are skipped. ``max_chars`` (MAX_LINE_CHARS; 0: off): ASCII candidate lines no\n"
"strict shape reads are read with the general grammar (longer ones skipped). ``points``: bytes of 40-byte records (value d, epoch d, step q,\n"
"total q, code q); ``hands``: list of (k, line str, hn, ht) for the lines the Python parser\n"
"reads (k strict points before it; hn/ht the last strict header before it, -1 none);\n"
"``first``: index of the first point of each code (-1 none); ``header``: (n, total) of the last\n"
"strict header, or None; ``stopped``: the scan stopped after a possible epoch header line;\n"
"``line_ends``: the line ends passed (a CRLF once, also when its \\r lies before ``pos``);\n"
"``names``: list of (kind, name) of codes 3, 4, ... (the general grammar's other series).");

static PyObject *py_scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, max_line, max_chars = 0;
    double ctx;
    long long ctx_total;
    PyObject *points = NULL, *hands = NULL, *result = NULL, *first = NULL, *names = NULL;
    if (!PyArg_ParseTuple(args, "y*ndLn|n", &view, &pos, &ctx, &ctx_total, &max_line, &max_chars))
        return NULL;
    scan_t s;
    memset(&s, 0, sizeof s);
    if (pos < 0 || pos > view.len || max_line < 0 || max_chars < 0) {
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
    s.max_chars = (size_t)max_chars;
    s.names.item = sizeof(name_t);
    s.name_text.item = 1;
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
    first = PyTuple_New(3 + (Py_ssize_t)s.names.len);
    names = PyList_New((Py_ssize_t)s.names.len);
    if (first == NULL || names == NULL) {
        Py_DECREF(header);
        goto done;
    }
    for (Py_ssize_t c = 0; c < 3 + (Py_ssize_t)s.names.len; c++) {
        int64_t f = c < 3 ? s.first[c] : ((name_t *)s.names.p)[c - 3].first;
        PyObject *v = PyLong_FromLongLong((long long)f);
        if (v == NULL) {
            Py_DECREF(header);
            goto done;
        }
        PyTuple_SET_ITEM(first, c, v);
    }
    for (size_t i = 0; i < s.names.len; i++) {
        name_t *nm = (name_t *)s.names.p + i;
        PyObject *item = Py_BuildValue("(sN)", nm->kind ? "eval" : "train",
                                       PyUnicode_DecodeASCII((const char *)s.name_text.p + nm->off, (Py_ssize_t)nm->len, "strict"));
        if (item == NULL) {
            Py_DECREF(header);
            goto done;
        }
        PyList_SET_ITEM(names, (Py_ssize_t)i, item);
    }
    result = Py_BuildValue("(nOOONOLO)", (Py_ssize_t)s.pos, points, hands, first, header,
                           s.stopped ? Py_True : Py_False, (long long)s.line_ends, names);
done:
    Py_XDECREF(points);
    Py_XDECREF(hands);
    Py_XDECREF(first);
    Py_XDECREF(names);
    free(s.points.p);
    free(s.hands.p);
    free(s.clean);
    free(s.names.p);
    free(s.name_text.p);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(merge_doc,
"merge(points, code_map, side_series, side_values, side_steps, side_epochs, side_totals, side_pos)\n"
"-> (series, values, steps, epochs, totals)\n\n"
"Columns (bytes for array('i'), 'd', 'q', 'd', 'q') of the strict ``points`` of scan() with the\n"
"side points inserted: side point j goes before strict point side_pos[j] (non-decreasing).\n"
"``code_map``: the batch's series index for each code (a sequence of ints).");

static PyObject *py_merge(PyObject *self, PyObject *args) {
    Py_buffer pts, ss, sv, sst, se, stt, sp;
    PyObject *code_map, *out[5] = {NULL, NULL, NULL, NULL, NULL}, *result = NULL, *seq = NULL;
    int *map = NULL;
    Py_ssize_t ncodes = 0;
    if (!PyArg_ParseTuple(args, "y*Oy*y*y*y*y*y*", &pts, &code_map, &ss, &sv, &sst, &se, &stt, &sp))
        return NULL;
    seq = PySequence_Fast(code_map, "merge: code_map must be a sequence of ints");
    if (seq == NULL)
        goto done;
    ncodes = PySequence_Fast_GET_SIZE(seq);
    map = PyMem_Malloc((size_t)(ncodes ? ncodes : 1) * sizeof(int));
    if (map == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t c = 0; c < ncodes; c++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, c));
        if (v == -1 && PyErr_Occurred())
            goto done;
        map[c] = (int)v;
    }
    Py_ssize_t n = pts.len / (Py_ssize_t)sizeof(point_t), m = sv.len / 8;
    if (pts.len % (Py_ssize_t)sizeof(point_t) || ss.len != m * 4 || sst.len != m * 8 || se.len != m * 8 ||
        stt.len != m * 8 || sp.len != m * 8) {
        PyErr_SetString(PyExc_ValueError, "merge: column lengths differ");
        goto done;
    }
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
        if (P[i].code < 0 || P[i].code >= ncodes) {
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
    Py_XDECREF(seq);
    PyMem_Free(map);
    PyBuffer_Release(&pts);
    PyBuffer_Release(&ss);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&sst);
    PyBuffer_Release(&se);
    PyBuffer_Release(&stt);
    PyBuffer_Release(&sp);
    return result;
}

PyDoc_STRVAR(select_doc,
"select(mask, column, itemsize) -> bytes\n\n"
"The items of ``column`` (a buffer such as an array('d'), of ``itemsize`` bytes each) whose byte in\n"
"``mask`` (one byte per item) is non-zero, in order, as raw bytes (``array.frombytes``\n"
"rebuilds the column). ``mask`` must be as long as ``column`` has items.");

static PyObject *py_select(PyObject *self, PyObject *args) {
    Py_buffer mb, cb;
    PyObject *result = NULL;
    (void)self;
    Py_ssize_t isz;
    if (!PyArg_ParseTuple(args, "y*y*n", &mb, &cb, &isz))
        return NULL;
    Py_ssize_t n = isz > 0 ? cb.len / isz : -1;
    if (isz <= 0 || mb.len != n || n * isz != cb.len) {
        PyErr_SetString(PyExc_ValueError, "select: itemsize, mask and column lengths disagree");
        goto done;
    }
    const unsigned char *m = (const unsigned char *)mb.buf;
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        count += m[i] != 0;
    result = PyBytes_FromStringAndSize(NULL, count * isz);
    if (result == NULL)
        goto done;
    {
        char *dst = PyBytes_AS_STRING(result);
        const char *src = (const char *)cb.buf;
        if (isz == 8) {
            for (Py_ssize_t i = 0; i < n; i++)
                if (m[i]) { memcpy(dst, src + i * 8, 8); dst += 8; }
        } else if (isz == 4) {
            for (Py_ssize_t i = 0; i < n; i++)
                if (m[i]) { memcpy(dst, src + i * 4, 4); dst += 4; }
        } else {
            for (Py_ssize_t i = 0; i < n; i++)
                if (m[i]) { memcpy(dst, src + i * isz, (size_t)isz); dst += isz; }
        }
    }
done:
    PyBuffer_Release(&mb);
    PyBuffer_Release(&cb);
    return result;
}

PyDoc_STRVAR(contains_any_doc,
"contains_any(buf, needles) -> bool\n\n"
"True when any of ``needles`` (a tuple of non-empty bytes) occurs in ``buf`` (bytes-like):\n"
"``any(n in buf for n in needles)`` with memmem.");

static PyObject *py_contains_any(PyObject *self, PyObject *args) {
    Py_buffer hb;
    PyObject *needles;
    int found = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O!", &hb, &PyTuple_Type, &needles))
        return NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(needles) && !found; k++) {
        PyObject *needle = PyTuple_GET_ITEM(needles, k);
        if (!PyBytes_Check(needle)) {
            PyBuffer_Release(&hb);
            PyErr_SetString(PyExc_TypeError, "contains_any: needles must be bytes");
            return NULL;
        }
        Py_ssize_t nl = PyBytes_GET_SIZE(needle);
        if (nl == 0 || memmem(hb.buf, (size_t)hb.len, PyBytes_AS_STRING(needle), (size_t)nl) != NULL)
            found = 1;
    }
    PyBuffer_Release(&hb);
    return PyBool_FromLong(found);
}

PyDoc_STRVAR(series_hints_doc,
"series_hints(buf) -> int\n\n"
"What the lines of ``buf`` (bytes-like) may hold beyond the single-loss grammar, as bit flags\n"
"(a superset: a set bit is a hint, a clear one a certainty), for costctl.progress.console:\n"
"1: a line with two ``loss`` words, or ``loss`` joined by ``_`` (``_loss``, ``loss_``), any\n"
"case, not counting a ``loss`` that an eval-side word names (``val_loss``, ``val loss``:\n"
"several named *train* losses: costctl.progress.named); 2: ``grad_norm`` / ``grad norm``, any\n"
"case (costctl.progress.grad_norms); 4: a line starting (after blanks) with ``Epoch``, blanks\n"
"and a letter or ``_`` (a column table's header). One pass over the bytes.");

static inline int ci_at(const unsigned char *b, Py_ssize_t n, Py_ssize_t i, const char *lit, Py_ssize_t len) {
    if (i + len > n)
        return 0;
    for (Py_ssize_t k = 0; k < len; k++)
        if ((b[i + k] | 0x20) != (unsigned char)lit[k])
            return 0;
    return 1;
}

/* series_hints' events: line ends, and the first letters of "loss" and "rad" (either case). */
static unsigned char hint_table[256];

static void hint_table_init(void) {
    hint_table['\n'] = hint_table['\r'] = 1;
    hint_table['l'] = hint_table['L'] = 2;
    hint_table['r'] = hint_table['R'] = 3;
}

/* A column table's header at b[i] (a line start): blanks, "Epoch", blanks, a letter or "_". */
static inline int table_header_at(const unsigned char *b, Py_ssize_t n, Py_ssize_t i) {
    while (i < n && (b[i] == ' ' || b[i] == '\t'))
        i++;
    if (!(i + 5 < n && memcmp(b + i, "Epoch", 5) == 0 && (b[i + 5] == ' ' || b[i + 5] == '\t')))
        return 0;
    for (i += 5; i < n && (b[i] == ' ' || b[i] == '\t'); i++)
        ;
    return i < n && (b[i] == '_' || ((b[i] | 0x20) >= 'a' && (b[i] | 0x20) <= 'z'));
}

/* b[i] starts "loss": the word before it, after one separator of " _/.-", is an eval-side (or
   test/predict) head as costctl.progress.series.kind_of reads it: a whole word (not after a
   letter, digit or "_"). Such a loss never makes a line worth the named-loss reader. */
static int eval_headed(const unsigned char *b, Py_ssize_t i) {
    static const char *const heads[] = {"v", "val", "valid", "validation", "eval", "evaluation", "dev",
                                        "test", "predict", NULL};
    if (i < 2)
        return 0;
    unsigned char sep = b[i - 1];
    if (!(sep == ' ' || sep == '_' || sep == '/' || sep == '.' || sep == '-'))
        return 0;
    Py_ssize_t end = i - 1, start = end;
    while (start > 0 && ((b[start - 1] | 0x20) >= 'a' && (b[start - 1] | 0x20) <= 'z'))
        start--;
    if (start > 0) {
        unsigned char c = b[start - 1];
        if (c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'))
            return 0;
    }
    Py_ssize_t len = end - start;
    for (int k = 0; heads[k] != NULL; k++)
        if ((Py_ssize_t)strlen(heads[k]) == len && ci_at(b, end, start, heads[k], len))
            return 1;
    return 0;
}

static PyObject *py_series_hints(PyObject *self, PyObject *args) {
    Py_buffer hb;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*", &hb))
        return NULL;
    const unsigned char *b = (const unsigned char *)hb.buf;
    Py_ssize_t n = hb.len;
    long flags = 0;
    int losses = 0;
    Py_BEGIN_ALLOW_THREADS
    if (table_header_at(b, n, 0))
        flags |= 4;
    Py_ssize_t i = 0;
    while (i < n && flags != 7) {
        while (i < n && !hint_table[b[i]])  /* the boring bytes: one load and test each */
            i++;
        if (i >= n)
            break;
        switch (hint_table[b[i]]) {
        case 1:
            losses = 0;
            if (table_header_at(b, n, i + 1))
                flags |= 4;
            i++;
            break;
        case 2:
            if (ci_at(b, n, i, "loss", 4)) {
                if (!eval_headed(b, i)
                    && ((i > 0 && b[i - 1] == '_') || (i + 4 < n && b[i + 4] == '_') || ++losses >= 2))
                    flags |= 1;
                i += 4;
            } else {
                i++;
            }
            break;
        default:
            if (i + 8 <= n && ci_at(b, n, i, "rad", 3) && (b[i + 3] == '_' || b[i + 3] == ' ')
                && ci_at(b, n, i + 4, "norm", 4)) {
                flags |= 2;
                i += 8;
            } else {
                i++;
            }
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&hb);
    return PyLong_FromLong(flags);
}

static int double_view(PyObject *obj, Py_buffer *view, Py_ssize_t *n) {
    if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->itemsize != 8 || view->format == NULL || strcmp(view->format, "d") != 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "expected a buffer of doubles (array('d'))");
        return -1;
    }
    *n = view->len / 8;
    return 0;
}

PyDoc_STRVAR(extremes_doc,
"extremes(values, start, stop) -> (low, i_low, high, i_high, nonfinite)\n\n"
"Over ``values[start:stop]`` (an array('d')): the first lowest and the first highest finite\n"
"value and their indexes (-1 and NaN when none is finite), and how many are NaN/inf.");

static PyObject *py_extremes(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t start, stop, n;
    Py_buffer view;
    (void)self;
    if (!PyArg_ParseTuple(args, "Onn", &obj, &start, &stop))
        return NULL;
    if (double_view(obj, &view, &n) < 0)
        return NULL;
    if (start < 0) start = 0;
    if (stop > n) stop = n;
    const double *v = (const double *)view.buf;
    double lo = NAN, hi = NAN;
    Py_ssize_t ilo = -1, ihi = -1, bad = 0;
    for (Py_ssize_t i = start; i < stop; i++) {
        double x = v[i];
        if (!isfinite(x)) { bad++; continue; }
        if (ilo < 0) { lo = hi = x; ilo = ihi = i; continue; }
        if (x < lo) { lo = x; ilo = i; }
        if (x > hi) { hi = x; ihi = i; }
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(dndnn)", lo, ilo, hi, ihi, bad);
}

PyDoc_STRVAR(first_beyond_doc,
"first_beyond(values, start, threshold, below) -> int\n\n"
"The first index >= ``start`` of ``values`` (an array('d')) with ``values[i] < threshold``\n"
"(``below`` true) or ``values[i] > threshold`` (false), as Python compares floats (a NaN\n"
"is never beyond); ``len(values)`` when none is.");

static PyObject *py_first_beyond(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t start, n, i;
    double thr;
    int below;
    Py_buffer view;
    (void)self;
    if (!PyArg_ParseTuple(args, "Ondp", &obj, &start, &thr, &below))
        return NULL;
    if (double_view(obj, &view, &n) < 0)
        return NULL;
    const double *v = (const double *)view.buf;
    i = start < 0 ? 0 : start;
    if (below) {
        for (; i < n; i++)
            if (v[i] < thr) break;
    } else {
        for (; i < n; i++)
            if (v[i] > thr) break;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(i);
}

PyDoc_STRVAR(new_lows_doc,
"new_lows(values, start, stop, running, improvement) -> (running, i_last)\n\n"
"The running minimum over ``values[start:stop]`` (finite values of an array('d')) from\n"
"``running``, and the index of the last new low that improved on the previous one by more\n"
"than ``improvement`` (relative; any low when ``running`` was inf or 0), -1 when none. The\n"
"same float operations as loss_stats' Python loop.");

static PyObject *py_new_lows(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t start, stop, n, last = -1;
    double running, imp;
    Py_buffer view;
    (void)self;
    if (!PyArg_ParseTuple(args, "Onndd", &obj, &start, &stop, &running, &imp))
        return NULL;
    if (double_view(obj, &view, &n) < 0)
        return NULL;
    if (start < 0) start = 0;
    if (stop > n) stop = n;
    const double *v = (const double *)view.buf;
    for (Py_ssize_t i = start; i < stop; i++) {
        double x = v[i];
        if (x < running) {
            if (running == INFINITY) {
                last = i;
            } else {
                double a = fabs(running);
                /* a fall from 0 (a loss that goes negative) is infinitely large relatively */
                if (a == 0.0 || (running - x) / a > imp)
                    last = i;
            }
            running = x;
        }
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(dn)", running, last);
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, scan_doc},
    {"merge", py_merge, METH_VARARGS, merge_doc},
    {"select", py_select, METH_VARARGS, select_doc},
    {"contains_any", py_contains_any, METH_VARARGS, contains_any_doc},
    {"series_hints", py_series_hints, METH_VARARGS, series_hints_doc},
    {"extremes", py_extremes, METH_VARARGS, extremes_doc},
    {"first_beyond", py_first_beyond, METH_VARARGS, first_beyond_doc},
    {"new_lows", py_new_lows, METH_VARARGS, new_lows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "costctl.progress._scan",
    "Native block scanner for costctl.progress.lines (see its docstring).", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    hint_table_init();
    if (c_locale == (locale_t)0) {
        c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
        if (c_locale == (locale_t)0) {
            PyErr_SetString(PyExc_ImportError, "newlocale(C) failed");
            return NULL;
        }
    }
    return PyModule_Create(&module);
}
