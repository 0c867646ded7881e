/*
 * shim_mpit.c -- the MPI tool information interface (MPI_T) as the shim uses it.
 *
 *  control variables  the library's algorithm knobs (Open MPI coll_*, MPICH/MVAPICH MPIR_CVAR_*,
 *                     MV2_*), read once after MPI_Init into META "cvar.<name>" (enumerations by
 *                     their item name), and the tuning files they name into META "file.<name>":
 *                     what the collective mirror decides with at ingest;
 *  performance variables  every pvar the library offers that is bound to nothing or to a
 *                     communicator (bound to MPI_COMM_WORLD), read at every flush and at finalize
 *                     into PVARS blocks: per rank time series, the data behind PVAR charts.
 *
 * The flush thread reads pvars only when MPI_T grants MPI_THREAD_MULTIPLE; otherwise they are
 * read at finalize alone (META "pvars" says which).  Two library defects are stepped around:
 * Open MPI 4.1 keeps stale entries of deregistered pvars in the MPI_T index (a pvar is used only
 * where MPI_T_pvar_get_index of its name gives its own index back), and its psm2 MTL registers
 * pvars whose first read crashes when that MTL is not the one in use (names in SKIP below;
 * RANKMAP_PVARS_SKIP=prefix,... adds more, RANKMAP_PVARS=0 turns pvars off).
 */
#include "shim_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- control variables ------------------------------------------------------------------------ */

static int mpit_on, mpit_mt;
int rm_pml_monitoring = -1;

static int wanted_cvar(const char *name) {
  static const char *prefixes[] = {"coll_", "MPIR_CVAR_", "MV2_", "pml_monitoring_enable"};
  if (strcmp(name, "coll") == 0) return 1;           /* Open MPI's coll component selection */
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
    if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return 1;
  return 0;
}

/* a tuning file named by a variable: its content goes to META so ingest needs no file access */
static void file_to_meta(const char *var, const char *path) {
  if (!path || !*path) return;
  FILE *f = fopen(path, "r");
  char key[300];
  snprintf(key, sizeof key, "file.%s", var);
  if (!f) { rmrec_meta(rm_R, key, ""); return; }
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap + 1);
  if (buf) { n = fread(buf, 1, cap, f); buf[n] = 0; rmrec_meta(rm_R, key, buf); free(buf); }
  fclose(f);
}

static int is_file_var(const char *name) {
  return strstr(name, "dynamic_rules_filename") || strstr(name, "TUNING_JSON_FILE");
}

static void enum_name(MPI_T_enum e, int v, char *out, size_t cap) {
  int num = 0, len = 0;
  char nm[8];
  len = (int)sizeof nm;
  snprintf(out, cap, "%d", v);
  if (MPI_T_enum_get_info(e, &num, nm, &len) != MPI_SUCCESS) return;
  for (int i = 0; i < num; i++) {
    int val = 0, l = (int)cap;
    char item[256];
    l = (int)sizeof item;
    if (MPI_T_enum_get_item(e, i, &val, item, &l) == MPI_SUCCESS && val == v) {
      snprintf(out, cap, "%s", item);
      return;
    }
  }
}

static void cvars_to_meta(void) {
  int n = 0;
  if (MPI_T_cvar_get_num(&n) != MPI_SUCCESS) return;
  for (int i = 0; i < n; i++) {
    char name[256], desc[8], val[512], key[300];
    int nl = (int)sizeof name, dl = (int)sizeof desc, verb, bind, scope, count = 0;
    MPI_Datatype dt;
    MPI_T_enum en;
    if (MPI_T_cvar_get_info(i, name, &nl, &verb, &dt, &en, desc, &dl, &bind, &scope) != MPI_SUCCESS) continue;
    if (bind != MPI_T_BIND_NO_OBJECT || !wanted_cvar(name)) continue;
    MPI_T_cvar_handle h;
    if (MPI_T_cvar_handle_alloc(i, NULL, &h, &count) != MPI_SUCCESS) continue;
    union { int i; unsigned u; unsigned long ul; unsigned long long ull; MPI_Count c; double d; char s[512]; } v;
    memset(&v, 0, sizeof v);
    int ok = 0;
    if (dt == MPI_CHAR) {
      if (count < (int)sizeof v.s && MPI_T_cvar_read(h, v.s) == MPI_SUCCESS) {
        v.s[sizeof v.s - 1] = 0;
        snprintf(val, sizeof val, "%s", v.s);
        ok = 1;
      }
    } else if (count == 1 && MPI_T_cvar_read(h, &v) == MPI_SUCCESS) {
      ok = 1;
      if (dt == MPI_INT) {
        if (en != MPI_T_ENUM_NULL) enum_name(en, v.i, val, sizeof val);
        else snprintf(val, sizeof val, "%d", v.i);
        if (strcmp(name, "pml_monitoring_enable") == 0) rm_pml_monitoring = v.i;
      } else if (dt == MPI_UNSIGNED) snprintf(val, sizeof val, "%u", v.u);
      else if (dt == MPI_UNSIGNED_LONG) snprintf(val, sizeof val, "%lu", v.ul);
      else if (dt == MPI_UNSIGNED_LONG_LONG) snprintf(val, sizeof val, "%llu", v.ull);
      else if (dt == MPI_COUNT) snprintf(val, sizeof val, "%lld", (long long)v.c);
      else if (dt == MPI_DOUBLE) snprintf(val, sizeof val, "%.17g", v.d);
      else ok = 0;
    }
    MPI_T_cvar_handle_free(&h);
    if (!ok) continue;
    snprintf(key, sizeof key, "cvar.%s", name);
    rmrec_meta(rm_R, key, val);
    if (is_file_var(name)) file_to_meta(name, val);
  }
}

/* ---- performance variables -------------------------------------------------------------------- */

#define MAX_PVARS 4096
#define MAX_PVAR_COUNT 65536
enum { VT_U64 = 0, VT_I64 = 1, VT_F64 = 2 };

typedef struct {
  MPI_T_pvar_handle h;
  int count, cls, vtype, bind, esize, written;
  char *name;
  uint64_t *last;                  /* the values of the previous sample (8 bytes each) */
} pv_t;

static MPI_T_pvar_session sess;
static pv_t *pv;
static int npv, have_sess;
static void *rbuf;                 /* raw read buffer */
static uint64_t *vbuf;             /* converted values */

/* PVARS entries, from the one layout declaration (rmrec_layout.h, docs/record-format.md) */
#pragma pack(push, 1)
typedef struct { RMREC_ROW_PVAR_DEF(RMREC_FIELD_, RMREC_ARRAY_) } pvar_def_t;
typedef struct { RMREC_ROW_PVAR_SAMPLE(RMREC_FIELD_, RMREC_ARRAY_) } pvar_sample_t;
#pragma pack(pop)
_Static_assert(sizeof(pvar_def_t) == 16, "pvar definition");
_Static_assert(sizeof(pvar_sample_t) == 24, "pvar sample");

static const char *SKIP[] = {"mtl_psm2_"};

static int skipped(const char *name) {
  for (size_t i = 0; i < sizeof SKIP / sizeof SKIP[0]; i++)
    if (strncmp(name, SKIP[i], strlen(SKIP[i])) == 0) return 1;
  const char *extra = getenv("RANKMAP_PVARS_SKIP");
  while (extra && *extra) {
    const char *e = strchr(extra, ',');
    size_t n = e ? (size_t)(e - extra) : strlen(extra);
    if (n && strncmp(name, extra, n) == 0) return 1;
    extra = e ? e + 1 : NULL;
  }
  return 0;
}

static int type_info(MPI_Datatype dt, int *vtype) {
  if (dt == MPI_UNSIGNED) { *vtype = VT_U64; return 4; }
  if (dt == MPI_UNSIGNED_LONG) { *vtype = VT_U64; return (int)sizeof(unsigned long); }
  if (dt == MPI_UNSIGNED_LONG_LONG) { *vtype = VT_U64; return 8; }
  if (dt == MPI_COUNT) { *vtype = VT_I64; return (int)sizeof(MPI_Count); }
  if (dt == MPI_INT) { *vtype = VT_I64; return 4; }
  if (dt == MPI_LONG) { *vtype = VT_I64; return (int)sizeof(long); }
  if (dt == MPI_LONG_LONG) { *vtype = VT_I64; return 8; }
  if (dt == MPI_DOUBLE) { *vtype = VT_F64; return 8; }
  return 0;
}

static void pvars_setup(void) {
  int n = 0;
  if (MPI_T_pvar_get_num(&n) != MPI_SUCCESS || n <= 0) return;
  if (MPI_T_pvar_session_create(&sess) != MPI_SUCCESS) return;
  have_sess = 1;
  if (n > MAX_PVARS) n = MAX_PVARS;
  pv = calloc((size_t)n, sizeof *pv);
  rbuf = malloc((size_t)MAX_PVAR_COUNT * 8);
  vbuf = malloc((size_t)MAX_PVAR_COUNT * 8);
  if (!pv || !rbuf || !vbuf) return;
  MPI_Comm world = MPI_COMM_WORLD;
  for (int i = 0; i < n; i++) {
    char name[256], desc[8];
    int nl = (int)sizeof name, dl = (int)sizeof desc, verb, cls, bind, ro, cont, atomic, count = 0, vtype = 0;
    MPI_Datatype dt;
    MPI_T_enum en;
    if (MPI_T_pvar_get_info(i, name, &nl, &verb, &cls, &dt, &en, desc, &dl, &bind, &ro, &cont, &atomic) != MPI_SUCCESS)
      continue;
    int esize = type_info(dt, &vtype), own = -1;
    if (!esize || (bind != MPI_T_BIND_NO_OBJECT && bind != MPI_T_BIND_MPI_COMM) || skipped(name)) continue;
    if (MPI_T_pvar_get_index(name, cls, &own) != MPI_SUCCESS || own != i) continue;   /* stale entry */
    pv_t *p = &pv[npv];
    if (MPI_T_pvar_handle_alloc(sess, i, bind == MPI_T_BIND_MPI_COMM ? (void *)&world : NULL, &p->h, &count) != MPI_SUCCESS)
      continue;
    if (count <= 0 || count > MAX_PVAR_COUNT) { MPI_T_pvar_handle_free(sess, &p->h); continue; }
    if (!cont) MPI_T_pvar_start(sess, p->h);     /* may fail for some; then its reads fail too */
    p->count = count; p->cls = cls; p->vtype = vtype; p->bind = bind; p->esize = esize;
    p->name = strdup(name);
    p->last = calloc((size_t)count, 8);
    if (!p->name || !p->last) { free(p->name); free(p->last); MPI_T_pvar_handle_free(sess, &p->h); continue; }
    npv++;
  }
}

static void to_u64(const pv_t *p, const void *raw, uint64_t *out) {
  for (int k = 0; k < p->count; k++) {
    const unsigned char *e = (const unsigned char *)raw + (size_t)k * (size_t)p->esize;
    if (p->vtype == VT_F64) { memcpy(&out[k], e, 8); continue; }
    if (p->esize == 4) {
      if (p->vtype == VT_U64) { uint32_t u; memcpy(&u, e, 4); out[k] = u; }
      else { int32_t s; memcpy(&s, e, 4); out[k] = (uint64_t)(int64_t)s; }
    } else memcpy(&out[k], e, 8);
  }
}

void rm_mpit_sample(rmrec_t *c, int final) {
  if (!mpit_on || !npv || (!final && !mpit_mt)) return;
  int64_t t = rmrec_elapsed_ns(c);
  for (int i = 0; i < npv; i++) {
    pv_t *p = &pv[i];
    if (MPI_T_pvar_read(sess, p->h, rbuf) != MPI_SUCCESS) continue;
    to_u64(p, rbuf, vbuf);
    int changed = !p->written || memcmp(vbuf, p->last, (size_t)p->count * 8) != 0;
    if (!p->written) {
      size_t nl = strlen(p->name);
      unsigned char d[16 + 256];
      pvar_def_t h = {0};
      h.kind = 1; h.cls = (uint8_t)p->cls; h.vtype = (uint8_t)p->vtype;
      h.bound = (uint8_t)(p->bind == MPI_T_BIND_MPI_COMM);
      h.id = (uint32_t)i; h.count = (uint32_t)p->count; h.name_length = (uint16_t)nl;
      memcpy(d, &h, sizeof h);
      memcpy(d + sizeof h, p->name, nl);
      rmrec_put(c, RMREC_BT_PVARS, d, (uint32_t)(sizeof h + nl));
      p->written = 1;
    }
    if (!changed && !final) continue;
    memcpy(p->last, vbuf, (size_t)p->count * 8);
    pvar_sample_t s = {0};
    s.kind = 2; s.vtype = (uint8_t)p->vtype; s.id = (uint32_t)i; s.t_ns = t; s.count = (uint32_t)p->count;
    size_t len = sizeof s + (size_t)p->count * 8;
    unsigned char *row = malloc(len);
    if (!row) continue;
    memcpy(row, &s, sizeof s);
    memcpy(row + sizeof s, vbuf, (size_t)p->count * 8);
    rmrec_put(c, RMREC_BT_PVARS, row, (uint32_t)len);
    free(row);
  }
}

/* ---- setup / teardown -------------------------------------------------------------------------- */

void rm_mpit_setup(void) {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    rmrec_meta(rm_R, "pvars", "MPI_T unavailable");
    return;
  }
  mpit_on = 1;
  mpit_mt = provided >= MPI_THREAD_MULTIPLE;
  cvars_to_meta();
  const char *want = getenv("RANKMAP_PVARS");
  if (want && strcmp(want, "0") == 0) { rmrec_meta(rm_R, "pvars", "off (RANKMAP_PVARS=0)"); return; }
  pvars_setup();
  char v[96];
  snprintf(v, sizeof v, "%d variables, read %s", npv, mpit_mt ? "at every flush and at finalize" : "at finalize");
  rmrec_meta(rm_R, "pvars", v);
}

void rm_mpit_teardown(void) {
  if (!mpit_on) return;
  for (int i = 0; i < npv; i++) MPI_T_pvar_handle_free(sess, &pv[i].h);
  if (have_sess) MPI_T_pvar_session_free(&sess);
  npv = 0;
  mpit_on = 0;
  MPI_T_finalize();
}
