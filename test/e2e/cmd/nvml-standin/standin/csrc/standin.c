/*
 * nvml-standin: a stand-in libnvidia-ml.so.1 for the node tier (issue 27).
 *
 * It answers the NVML calls gpudra makes from a machine described in a text file next to the
 * library ("<dir of this library>/nvml-standin.state", written by the Go package standin from
 * a gpu/gputest machine). MIG changes (SetMigMode, creating and destroying GPU and compute
 * instances) and compute modes are written back to that file under an exclusive lock on
 * "<state>.lock", by rename, so they survive the process (a plugin restart) and another
 * process can read them at any time. A state file that is a symbolic link is followed: the state,
 * its lock and temporary files then live in the target's directory (for a read-only driver root).
 * Every other function nvml.h declares comes from the
 * generated stubs (weak symbols answering NVML_ERROR_NOT_SUPPORTED): the process that loads this
 * library never dies of a missing symbol.
 *
 * State file, one record per line, fields separated by single spaces ("-" for an empty list):
 *   driver <version>            nvml <version>            cuda <int>
 *   gpu <index> <minor> <brand> <arch> <ccMajor> <ccMinor> <memBytes> <numa|-1> <cores|-1>
 *       <pciDeviceId> <pciSubsystemId> <busId> <migCapable> <migMode> <computeMode>
 *       <generation> <uuid> <name (rest of line)>
 *   giprof <gpu> <enum> <id> <slices> <instances> <sms> <ce> <dec> <enc> <jpg> <ofa> <memMiB>
 *       <start:size,...> <name>
 *   ciprof <gpu> <giProfileId> <enum> <id> <slices> <instances> <sms> <start,...>
 *   gi <gpu> <id> <profileId> <start> <size>
 *   ci <gpu> <giId> <id> <profileId> <start> <computeMode> <uuid>
 *   events <gpu> <supported event type mask>
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <libgen.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nvml.h"

#define MAX_GPUS 16
#define MAX_GI_PROFILES 32
#define MAX_CI_PROFILES 96
#define MAX_PLACEMENTS 32
#define MAX_GI_ID 64
#define MAX_CI_ID 8
#define STR 128

struct giprof {
	unsigned int enum_, id, slices, instances, sms, ce, dec, enc, jpg, ofa;
	unsigned long long memMiB;
	unsigned int nplace, start[MAX_PLACEMENTS], size[MAX_PLACEMENTS];
	char name[STR];
};

struct ciprof {
	unsigned int giprof, enum_, id, slices, instances, sms;
	unsigned int nstarts, starts[MAX_PLACEMENTS];
};

struct gi {
	int used;
	unsigned int profid, start, size;
};

struct ci {
	int used;
	unsigned int profid, start, mode;
	char uuid[STR];
};

struct gpu {
	unsigned int minor, brand, arch, migcap, migmode, cmode;
	int ccmaj, ccmin, numa, cores;
	unsigned long long mem, gen, events;
	unsigned int pcidev, pcisub;
	char bus[STR], uuid[STR], name[STR];
	unsigned int ngip, ncip;
	struct giprof gip[MAX_GI_PROFILES];
	struct ciprof cip[MAX_CI_PROFILES];
	struct gi gis[MAX_GI_ID];
	struct ci cis[MAX_GI_ID][MAX_CI_ID];
};

struct machine {
	char driver[STR], nvml[STR];
	int cuda;
	unsigned int ngpus;
	struct gpu g[MAX_GPUS];
};

/* Handles: fixed addresses, one per GPU, GPU instance id and compute instance id. A device
 * handle with gi < 0 is a whole GPU, otherwise a MIG device. */
struct nvmlDevice_st { int gpu, gi, ci; };
struct nvmlGpuInstance_st { int gpu, gi; };
struct nvmlComputeInstance_st { int gpu, gi, ci; };
struct nvmlEventSet_st { int unused; };

static struct {
	pthread_mutex_t mu;
	int inits;
	char path[4096], lock[4200];
	struct stat seen;
	struct machine *m;
	struct nvmlDevice_st dev[MAX_GPUS];
	struct nvmlDevice_st mig[MAX_GPUS][MAX_GI_ID][MAX_CI_ID];
	struct nvmlGpuInstance_st gih[MAX_GPUS][MAX_GI_ID];
	struct nvmlComputeInstance_st cih[MAX_GPUS][MAX_GI_ID][MAX_CI_ID];
} S = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void handles(void)
{
	for (int i = 0; i < MAX_GPUS; i++) {
		S.dev[i] = (struct nvmlDevice_st){ i, -1, -1 };
		for (int g = 0; g < MAX_GI_ID; g++) {
			S.gih[i][g] = (struct nvmlGpuInstance_st){ i, g };
			for (int c = 0; c < MAX_CI_ID; c++) {
				S.mig[i][g][c] = (struct nvmlDevice_st){ i, g, c };
				S.cih[i][g][c] = (struct nvmlComputeInstance_st){ i, g, c };
			}
		}
	}
}

/* ---- the state file ---- */

static int parse_pairs(const char *s, unsigned int *a, unsigned int *b, unsigned int max)
{
	unsigned int n = 0;
	if (strcmp(s, "-") == 0)
		return 0;
	while (*s && n < max) {
		char *end;
		a[n] = (unsigned int)strtoul(s, &end, 10);
		if (b) {
			if (*end != ':')
				return -1;
			b[n] = (unsigned int)strtoul(end + 1, &end, 10);
		}
		n++;
		if (*end == ',')
			end++;
		else if (*end != '\0')
			return -1;
		s = end;
	}
	return (int)n;
}

static int parse_gpu(struct machine *m, const char *line)
{
	struct gpu g;
	unsigned int idx;
	int off = 0;
	memset(&g, 0, sizeof g);
	if (sscanf(line, "gpu %u %u %u %u %d %d %llu %d %d %x %x %127s %u %u %u %llu %127s %n",
		   &idx, &g.minor, &g.brand, &g.arch, &g.ccmaj, &g.ccmin, &g.mem, &g.numa, &g.cores,
		   &g.pcidev, &g.pcisub, g.bus, &g.migcap, &g.migmode, &g.cmode, &g.gen, g.uuid, &off) < 17 ||
	    off == 0 || idx >= MAX_GPUS)
		return -1;
	snprintf(g.name, sizeof g.name, "%s", line + off);
	g.name[strcspn(g.name, "\n")] = 0;
	m->g[idx] = g;
	if (idx + 1 > m->ngpus)
		m->ngpus = idx + 1;
	return 0;
}

static int parse_giprof(struct machine *m, const char *line)
{
	struct giprof p;
	unsigned int gpu;
	char places[1024];
	int off = 0, n;
	memset(&p, 0, sizeof p);
	if (sscanf(line, "giprof %u %u %u %u %u %u %u %u %u %u %u %llu %1023s %n", &gpu, &p.enum_, &p.id,
		   &p.slices, &p.instances, &p.sms, &p.ce, &p.dec, &p.enc, &p.jpg, &p.ofa, &p.memMiB, places,
		   &off) < 13 || gpu >= MAX_GPUS || m->g[gpu].ngip >= MAX_GI_PROFILES)
		return -1;
	if ((n = parse_pairs(places, p.start, p.size, MAX_PLACEMENTS)) < 0)
		return -1;
	p.nplace = (unsigned int)n;
	if (off)
		snprintf(p.name, sizeof p.name, "%s", line + off);
	p.name[strcspn(p.name, "\n")] = 0;
	m->g[gpu].gip[m->g[gpu].ngip++] = p;
	return 0;
}

static int parse_ciprof(struct machine *m, const char *line)
{
	struct ciprof p;
	unsigned int gpu;
	char starts[1024];
	int n;
	memset(&p, 0, sizeof p);
	if (sscanf(line, "ciprof %u %u %u %u %u %u %u %1023s", &gpu, &p.giprof, &p.enum_, &p.id, &p.slices,
		   &p.instances, &p.sms, starts) != 8 || gpu >= MAX_GPUS || m->g[gpu].ncip >= MAX_CI_PROFILES)
		return -1;
	if ((n = parse_pairs(starts, p.starts, NULL, MAX_PLACEMENTS)) < 0)
		return -1;
	p.nstarts = (unsigned int)n;
	m->g[gpu].cip[m->g[gpu].ncip++] = p;
	return 0;
}

static int parse_line(struct machine *m, const char *line)
{
	unsigned int gpu, id, giid;
	if (line[0] == '#' || line[0] == '\n' || line[0] == 0)
		return 0;
	if (sscanf(line, "driver %127s", m->driver) == 1 || sscanf(line, "nvml %127s", m->nvml) == 1 ||
	    sscanf(line, "cuda %d", &m->cuda) == 1)
		return 0;
	if (strncmp(line, "gpu ", 4) == 0)
		return parse_gpu(m, line);
	if (strncmp(line, "giprof ", 7) == 0)
		return parse_giprof(m, line);
	if (strncmp(line, "ciprof ", 7) == 0)
		return parse_ciprof(m, line);
	if (strncmp(line, "events ", 7) == 0) {
		unsigned long long ev;
		if (sscanf(line, "events %u %llu", &gpu, &ev) != 2 || gpu >= MAX_GPUS)
			return -1;
		m->g[gpu].events = ev;
		return 0;
	}
	if (strncmp(line, "gi ", 3) == 0) {
		struct gi g = { .used = 1 };
		if (sscanf(line, "gi %u %u %u %u %u", &gpu, &id, &g.profid, &g.start, &g.size) != 5 ||
		    gpu >= MAX_GPUS || id >= MAX_GI_ID)
			return -1;
		m->g[gpu].gis[id] = g;
		return 0;
	}
	if (strncmp(line, "ci ", 3) == 0) {
		struct ci c = { .used = 1 };
		if (sscanf(line, "ci %u %u %u %u %u %u %127s", &gpu, &giid, &id, &c.profid, &c.start, &c.mode,
			   c.uuid) != 7 || gpu >= MAX_GPUS || giid >= MAX_GI_ID || id >= MAX_CI_ID)
			return -1;
		m->g[gpu].cis[giid][id] = c;
		return 0;
	}
	return -1;
}

static int load_file(struct machine *m)
{
	char line[2048];
	int lineno = 0;
	FILE *f = fopen(S.path, "r");
	if (!f) {
		fprintf(stderr, "nvml-standin: open %s: %s\n", S.path, strerror(errno));
		return -1;
	}
	memset(m, 0, sizeof *m);
	while (fgets(line, sizeof line, f)) {
		lineno++;
		if (parse_line(m, line) != 0) {
			fprintf(stderr, "nvml-standin: %s:%d: cannot parse %s", S.path, lineno, line);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	return 0;
}

/* refresh rereads the state file when it changed (a rename gives it a new inode). The caller
 * holds S.mu. */
static nvmlReturn_t refresh(int force)
{
	struct stat st;
	if (!S.m)
		return NVML_ERROR_UNINITIALIZED;
	if (stat(S.path, &st) != 0)
		return NVML_ERROR_UNKNOWN;
	if (!force && st.st_ino == S.seen.st_ino && st.st_mtim.tv_sec == S.seen.st_mtim.tv_sec &&
	    st.st_mtim.tv_nsec == S.seen.st_mtim.tv_nsec && st.st_size == S.seen.st_size)
		return NVML_SUCCESS;
	if (load_file(S.m) != 0)
		return NVML_ERROR_UNKNOWN;
	S.seen = st;
	return NVML_SUCCESS;
}

static void put_list(FILE *f, const unsigned int *a, const unsigned int *b, unsigned int n)
{
	if (n == 0)
		fputs("-", f);
	for (unsigned int i = 0; i < n; i++) {
		if (b)
			fprintf(f, "%s%u:%u", i ? "," : "", a[i], b[i]);
		else
			fprintf(f, "%s%u", i ? "," : "", a[i]);
	}
}

static void write_gpu(FILE *f, unsigned int i, const struct gpu *g)
{
	fprintf(f, "gpu %u %u %u %u %d %d %llu %d %d 0x%08x 0x%08x %s %u %u %u %llu %s %s\n", i, g->minor,
		g->brand, g->arch, g->ccmaj, g->ccmin, g->mem, g->numa, g->cores, g->pcidev, g->pcisub, g->bus,
		g->migcap, g->migmode, g->cmode, g->gen, g->uuid, g->name);
	fprintf(f, "events %u %llu\n", i, g->events);
	for (unsigned int k = 0; k < g->ngip; k++) {
		const struct giprof *p = &g->gip[k];
		fprintf(f, "giprof %u %u %u %u %u %u %u %u %u %u %u %llu ", i, p->enum_, p->id, p->slices,
			p->instances, p->sms, p->ce, p->dec, p->enc, p->jpg, p->ofa, p->memMiB);
		put_list(f, p->start, p->size, p->nplace);
		fprintf(f, " %s\n", p->name);
	}
	for (unsigned int k = 0; k < g->ncip; k++) {
		const struct ciprof *p = &g->cip[k];
		fprintf(f, "ciprof %u %u %u %u %u %u %u ", i, p->giprof, p->enum_, p->id, p->slices, p->instances,
			p->sms);
		put_list(f, p->starts, NULL, p->nstarts);
		fputs("\n", f);
	}
	for (unsigned int id = 0; id < MAX_GI_ID; id++) {
		const struct gi *x = &g->gis[id];
		if (!x->used)
			continue;
		fprintf(f, "gi %u %u %u %u %u\n", i, id, x->profid, x->start, x->size);
		for (unsigned int c = 0; c < MAX_CI_ID; c++) {
			const struct ci *y = &g->cis[id][c];
			if (y->used)
				fprintf(f, "ci %u %u %u %u %u %u %s\n", i, id, c, y->profid, y->start, y->mode, y->uuid);
		}
	}
}

/* save writes the state through a temporary file and a rename. The caller holds S.mu and the
 * file lock. */
static nvmlReturn_t save(void)
{
	char tmp[4200];
	struct stat st;
	snprintf(tmp, sizeof tmp, "%s.tmp.%d", S.path, (int)getpid());
	FILE *f = fopen(tmp, "w");
	if (!f)
		return NVML_ERROR_UNKNOWN;
	fprintf(f, "# nvml-standin state\ndriver %s\nnvml %s\ncuda %d\n", S.m->driver, S.m->nvml, S.m->cuda);
	for (unsigned int i = 0; i < S.m->ngpus; i++)
		write_gpu(f, i, &S.m->g[i]);
	if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
		fclose(f);
		unlink(tmp);
		return NVML_ERROR_UNKNOWN;
	}
	fclose(f);
	if (rename(tmp, S.path) != 0) {
		unlink(tmp);
		return NVML_ERROR_UNKNOWN;
	}
	if (stat(S.path, &st) == 0)
		S.seen = st;
	return NVML_SUCCESS;
}

/* Locking: every call takes S.mu and rereads a changed file; a mutation also holds the file
 * lock from its reread to its write. */
static nvmlReturn_t enter(void)
{
	pthread_mutex_lock(&S.mu);
	nvmlReturn_t r = refresh(0);
	if (r != NVML_SUCCESS)
		pthread_mutex_unlock(&S.mu);
	return r;
}

static void leave(void) { pthread_mutex_unlock(&S.mu); }

static int lock_fd = -1;

static nvmlReturn_t enter_write(void)
{
	pthread_mutex_lock(&S.mu);
	if (!S.m) {
		pthread_mutex_unlock(&S.mu);
		return NVML_ERROR_UNINITIALIZED;
	}
	lock_fd = open(S.lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (lock_fd < 0 || flock(lock_fd, LOCK_EX) != 0) {
		if (lock_fd >= 0)
			close(lock_fd);
		pthread_mutex_unlock(&S.mu);
		return NVML_ERROR_UNKNOWN;
	}
	nvmlReturn_t r = refresh(1);
	if (r != NVML_SUCCESS) {
		close(lock_fd);
		pthread_mutex_unlock(&S.mu);
	}
	return r;
}

/* leave_write saves the state when ret is NVML_SUCCESS and releases the locks. */
static nvmlReturn_t leave_write(nvmlReturn_t ret)
{
	if (ret == NVML_SUCCESS)
		ret = save();
	close(lock_fd);
	lock_fd = -1;
	pthread_mutex_unlock(&S.mu);
	return ret;
}

/* ---- init ---- */

static nvmlReturn_t init(void)
{
	Dl_info info;
	pthread_mutex_lock(&S.mu);
	if (S.inits > 0) {
		S.inits++;
		pthread_mutex_unlock(&S.mu);
		return NVML_SUCCESS;
	}
	const char *env = getenv("NVML_STANDIN_STATE");
	if (env && *env) {
		snprintf(S.path, sizeof S.path, "%s", env);
	} else {
		if (!dladdr((void *)init, &info) || !info.dli_fname) {
			pthread_mutex_unlock(&S.mu);
			return NVML_ERROR_LIBRARY_NOT_FOUND;
		}
		char self[4096];
		snprintf(self, sizeof self, "%s", info.dli_fname);
		snprintf(S.path, sizeof S.path, "%s/nvml-standin.state", dirname(self));
	}
	/* A state file that is a link names where the state lives: a writable directory when the
	 * library's own is mounted read-only (as the chart mounts the driver root). */
	char real[PATH_MAX];
	if (realpath(S.path, real))
		snprintf(S.path, sizeof S.path, "%s", real);
	snprintf(S.lock, sizeof S.lock, "%s.lock", S.path);
	if (!S.m && !(S.m = calloc(1, sizeof *S.m))) {
		pthread_mutex_unlock(&S.mu);
		return NVML_ERROR_MEMORY;
	}
	handles();
	memset(&S.seen, 0, sizeof S.seen);
	if (refresh(1) != NVML_SUCCESS) {
		free(S.m);
		S.m = NULL;
		pthread_mutex_unlock(&S.mu);
		return NVML_ERROR_DRIVER_NOT_LOADED;
	}
	S.inits = 1;
	pthread_mutex_unlock(&S.mu);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return init(); }
nvmlReturn_t nvmlInit(void) { return init(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return init(); }

nvmlReturn_t nvmlShutdown(void)
{
	pthread_mutex_lock(&S.mu);
	if (S.inits == 0) {
		pthread_mutex_unlock(&S.mu);
		return NVML_ERROR_UNINITIALIZED;
	}
	if (--S.inits == 0) {
		free(S.m);
		S.m = NULL;
	}
	pthread_mutex_unlock(&S.mu);
	return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT: return "Timeout";
	case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
	case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
	case NVML_ERROR_IN_USE: return "In use by another client";
	case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
	case NVML_ERROR_MEMORY: return "Insufficient Memory";
	default: return "Unknown Error";
	}
}

/* ---- helpers; the caller holds S.mu ---- */

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src)
{
	if (!dst)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(src) + 1 > len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(dst, src, strlen(src) + 1);
	return NVML_SUCCESS;
}

/* gpu_of returns the GPU of a whole-GPU handle, NULL for anything else. */
static struct gpu *gpu_of(nvmlDevice_t d)
{
	if (!d.handle || d.handle->gpu < 0 || (unsigned int)d.handle->gpu >= S.m->ngpus || d.handle->gi >= 0)
		return NULL;
	return &S.m->g[d.handle->gpu];
}

/* ci_of returns the compute instance of a live MIG device handle, NULL otherwise. */
static struct ci *ci_of(nvmlDevice_t d)
{
	if (!d.handle || d.handle->gpu < 0 || (unsigned int)d.handle->gpu >= S.m->ngpus || d.handle->gi < 0 || d.handle->gi >= MAX_GI_ID ||
	    d.handle->ci < 0 || d.handle->ci >= MAX_CI_ID)
		return NULL;
	struct gpu *g = &S.m->g[d.handle->gpu];
	if (!g->gis[d.handle->gi].used || !g->cis[d.handle->gi][d.handle->ci].used)
		return NULL;
	return &g->cis[d.handle->gi][d.handle->ci];
}

/* any_gpu returns the GPU of a whole-GPU or live MIG device handle. */
static struct gpu *any_gpu(nvmlDevice_t d)
{
	if (gpu_of(d))
		return gpu_of(d);
	if (ci_of(d))
		return &S.m->g[d.handle->gpu];
	return NULL;
}

static struct giprof *giprof_by_id(struct gpu *g, unsigned int id)
{
	for (unsigned int i = 0; i < g->ngip; i++)
		if (g->gip[i].id == id)
			return &g->gip[i];
	return NULL;
}

static struct ciprof *ciprof_by_id(struct gpu *g, unsigned int giprof, unsigned int id)
{
	for (unsigned int i = 0; i < g->ncip; i++)
		if (g->cip[i].giprof == giprof && g->cip[i].id == id)
			return &g->cip[i];
	return NULL;
}

#define DEVICE_CALL(d, g, body)                                                                    \
	do {                                                                                       \
		nvmlReturn_t r_ = enter();                                                         \
		if (r_ != NVML_SUCCESS)                                                            \
			return r_;                                                                 \
		struct gpu *g = gpu_of(d);                                                         \
		if (!g) {                                                                          \
			leave();                                                                   \
			return NVML_ERROR_INVALID_ARGUMENT;                                        \
		}                                                                                  \
		body;                                                                              \
		leave();                                                                           \
		return r_;                                                                         \
	} while (0)

#include "standin_devices.inc"
#include "standin_mig.inc"
