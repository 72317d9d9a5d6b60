/*
 * Fake libnvidia-ml.so.1 for tests without a GPU.
 * Compiled against the real nvml.h (pip package nvidia-nvml-dev) so that
 * every prototype below is checked by the compiler against NVIDIA's ABI.
 *
 * Data comes from the text file named by $FAKE_NVML_CONFIG:
 *   driver 535.54.03
 *   nvml   12.535.54.03
 *   cuda   12020
 *   gpu <minor> <uuid> <busId> <pciDeviceId hex> <memTotalBytes> <ccMajor.ccMinor> <name ...rest of line>
 *   topo <i> <j> <level>          (optional; default NVML_TOPOLOGY_SYSTEM)
 *   board <i> <boardId>           (GPUs sharing a board id are one multi-GPU board, e.g. a K80)
 *   nvlink <i> <j> <links>        (<links> active NVLinks between GPU i and GPU j)
 *   nvswitch <i> <links>          (<links> active NVLinks from GPU i to the NVSwitches, as on an
 *                                 HGX board: every two GPUs with such links are NVLink peers,
 *                                 through the switches; the links are spread over 4 switches)
 *   notopo                        (NVML has no topology here, as in many VMs and vGPUs: the
 *                                 topology, P2P and NVLink calls answer NOT_SUPPORTED)
 *   util <i> <gpu%> <mem%>        (utilization rates)
 *   proc <i> <pid> <usedBytes> [<sm%>|none]  (a compute process on GPU i; memory used is their sum;
 *                                 none: listed, never sampled, as an MPS client)
 *   temp <i> <C> [<slowdownC> <shutdownC>]   (default 35 C, thresholds 90 / 95 C)
 *   power <i> <milliwatts>
 *   retired <i> <sbePages> <dbePages> <pending 0|1>
 *   remap <i> <correctable> <uncorrectable> <pending 0|1> <failure 0|1>
 *   mig <i> <current 0|1> <pending 0|1>   (GPU i is MIG capable; its MIG mode)
 *   giprofile <i> <profile> <id> <slices> <instances> <SMs> <memMiB> <name ...>
 *                                 a GPU instance profile GPU i offers: <profile> is the
 *                                 NVML_GPU_INSTANCE_PROFILE_* index, <id> the profile id
 *                                 (as nvidia-smi mig -lgip: 1g.18gb is index 0, id 19)
 *   migdev <i> <gi> <ci> <profileId> <start> <uuid>
 *                                 a MIG device of GPU i: GPU instance <gi> of that profile at
 *                                 placement <start>, with compute instance <ci> spanning it
 *   migproc <i> <gi> <ci> <pid> <usedBytes>   a compute process on that MIG device: listed
 *                                 by nvmlDeviceGetComputeRunningProcesses on the MIG device's
 *                                 handle (with its GPU and compute instance ids), its memory
 *                                 in the MIG device's nvmlDeviceGetMemoryInfo (as NVML)
 *   nomigproc <i> <gi> <ci> <pid> that process is gone from the MIG device
 * <i>, <j> are NVML indices (the order of the gpu lines).
 * Lines starting with '#' are ignored.
 * $FAKE_NVML_INIT_ERROR=<nvmlReturn_t code> makes init fail (e.g. 9 = DRIVER_NOT_LOADED).
 * The file is read at the first nvmlInit; an nvmlInit while NVML is held open (a
 * monitor's) reads its driver, nvml and cuda lines again when the file changed, and
 * fails with DRIVER_NOT_LOADED while the file is gone.
 *
 * Faults at run time: $FAKE_NVML_CONTROL names an append-only file of lines, read
 * whenever the library is called (and waited on by nvmlEventSetWait through
 * inotify, so a waiting thread wakes at once). Every line of the config file is
 * accepted there too (it changes the GPU from then on), and:
 *   xid <i> <code>                an XID critical error: an nvmlEventTypeXidCriticalError event
 *   ecc <i> sbe|dbe [<n>]         n single/double-bit ECC errors: the volatile and aggregate
 *                                 counts grow, and an event of that type is delivered
 *   lost <i> / found <i>          GPU i falls off the bus (every call on it answers
 *                                 NVML_ERROR_GPU_IS_LOST) / is back
 *   noproc <i> <pid>              that process is gone from GPU i
 *   fail <function> <code> [<n>]  the next n calls (0: every call until `heal`) of that
 *                                 NVML function return <code>
 *   delay <function> <seconds> [<n>]  the next n calls (0: every call until `heal`) of that
 *                                 NVML function answer only after <seconds> (a driver in
 *                                 trouble); the wait holds no lock, so other calls go on
 *   heal <function>               it answers normally again (no failure, no delay)
 *   nomigdev <i> <gi> <ci>        that MIG device is destroyed (an operator reshaping MIG)
 * Events are delivered, as by the real library, only to event sets registered
 * before the line was read: a process that starts later sees the state the lines
 * made, not their events. The library is thread-safe (one lock).
 */
#define _GNU_SOURCE 1                     /* the recursive mutex initializer */
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1   /* declare both nvmlInit and nvmlInit_v2 etc. */
#include <nvml.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAXGPU 64
#define MAXPROC 16
#define MAXSETS 16
#define MAXQUEUE 1024
#define MAXFAULTS 32
#define MAXMIG 256
#define SWITCH_PEER 0xFFFFu               /* linkPeer of a link that ends at an NVSwitch */
#define NVSWITCHES 4                      /* the switches an HGX board's links are spread over */
#define SUPPORTED_EVENTS (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | \
                          nvmlEventTypeXidCriticalError)

struct nvmlDevice_st {
    unsigned int index, minor;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned int pciDeviceId;
    unsigned long long memTotal;
    int ccMajor, ccMinor;
    unsigned int boardId;
    unsigned int utilGpu, utilMem;
    unsigned int nprocs;
    unsigned int procPid[MAXPROC];
    unsigned long long procUsed[MAXPROC];
    unsigned int procSm[MAXPROC];
    unsigned int nlinks;            /* active NVLinks; link k goes to linkPeer[k] */
    unsigned int linkPeer[NVML_NVLINK_MAX_LINKS];   /* SWITCH_PEER: an NVSwitch */
    unsigned int temp, tempSlowdown, tempShutdown;
    unsigned int powerMw;
    unsigned long long ecc[2][2];   /* [corrected 0 / uncorrected 1][volatile 0 / aggregate 1] */
    unsigned int retired[2];        /* pages retired for [multiple SBE 0 / DBE 1] */
    unsigned int retiredPending;
    unsigned int remapCorr, remapUnc, remapPending, remapFailure;
    int lost;
    /* MIG: on a GPU, its mode and the profiles it offers; on a MIG device, where it is */
    int migCapable;
    unsigned int migCurrent, migPending;
    struct { int set; unsigned int id, slices, instances, sms; unsigned long long memMiB;
             char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE]; } giProfile[NVML_GPU_INSTANCE_PROFILE_COUNT];
    int isMig;
    unsigned int parent, giId, ciId, giProfileId, giStart;
};

/* A GPU instance handle names the MIG device (slot in migs[]) that holds it. */
struct nvmlGpuInstance_st { unsigned int slot; };

struct event_set {
    int used;
    unsigned long long types[MAXGPU];          /* registered event types per device */
    nvmlEventData_t queue[MAXQUEUE];
    unsigned int head, count;
};

struct fault {
    char function[64];
    nvmlReturn_t code;
    int remaining;                             /* 0: until healed */
};

static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static struct nvmlDevice_st gpus[MAXGPU];
static unsigned int ngpus;
static int topo[MAXGPU][MAXGPU];
static int noTopology;                     /* `notopo`: no topology in this NVML */
static char driverVersion[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "0.0";
static char nvmlVersion[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = "0.0";
static int cudaVersion;
static int initCount;
static struct event_set sets[MAXSETS];
static struct fault faults[MAXFAULTS];
static struct nvmlDevice_st migs[MAXMIG];
/* Each GPU's nvmlComputeMode_t (DEFAULT until set). Kept across nvmlShutdown/nvmlInit,
 * as a real GPU keeps it, but in this process only: the daemon that sets it reads it
 * back itself. */
static unsigned int computeModes[MAXGPU];
static struct nvmlGpuInstance_st gis[MAXMIG];
static unsigned int nmigs;

struct delay {
    char function[64];
    double seconds;
    int remaining;                             /* 0: until healed */
};
static struct delay delays[MAXFAULTS];

/* the control file: read up to ctlOffset; a partial last line waits in ctlPartial */
static int ctlFd = -1;
static off_t ctlOffset;
static char ctlPartial[1024];
static size_t ctlPartialLen;
static int inotifyFd = -1;

static void unlock_now(int *unused) { (void)unused; pthread_mutex_unlock(&lock); }
/* Hold the library's lock until the end of the enclosing block. */
#define LOCKED() __attribute__((cleanup(unlock_now))) int locked_ = (pthread_mutex_lock(&lock), 0); (void)locked_

static struct nvmlDevice_st *device_at(unsigned int i) { return i < ngpus ? &gpus[i] : NULL; }

static void push_event(struct nvmlDevice_st *d, unsigned long long type, unsigned long long data)
{
    for (int s = 0; s < MAXSETS; s++) {
        struct event_set *set = &sets[s];
        if (!set->used || !(set->types[d->index] & type) || set->count >= MAXQUEUE) continue;
        nvmlEventData_t *e = &set->queue[(set->head + set->count++) % MAXQUEUE];
        memset(e, 0, sizeof *e);
        e->device = d;
        e->eventType = type;
        e->eventData = data;
        e->gpuInstanceId = 0xFFFFFFFF;
        e->computeInstanceId = 0xFFFFFFFF;
    }
}

/* A process NVML lists (its memory) but has no utilisation sample of: an MPS client,
 * whose SM use the H200 sampled as its MPS server's ("proc IDX PID USED none"). */
#define NO_SAMPLE 0xFFFFFFFFu

static void set_proc(struct nvmlDevice_st *d, unsigned int pid, unsigned long long used, unsigned int sm)
{
    for (unsigned int k = 0; k < d->nprocs; k++)
        if (d->procPid[k] == pid) { d->procUsed[k] = used; d->procSm[k] = sm; return; }
    if (d->nprocs < MAXPROC) {
        d->procPid[d->nprocs] = pid;
        d->procUsed[d->nprocs] = used;
        d->procSm[d->nprocs++] = sm;
    }
}

static void drop_proc(struct nvmlDevice_st *d, unsigned int pid)
{
    for (unsigned int k = 0; k < d->nprocs; k++)
        if (d->procPid[k] == pid) {
            d->nprocs--;
            d->procPid[k] = d->procPid[d->nprocs];
            d->procUsed[k] = d->procUsed[d->nprocs];
            d->procSm[k] = d->procSm[d->nprocs];
            return;
        }
}


/* --- MIG: the layout of a GPU's instances ----------------------------------------------- */

static int profile_slot(struct nvmlDevice_st *g, unsigned int id)
{
    for (int p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; p++)
        if (g->giProfile[p].set && g->giProfile[p].id == id) return p;
    return -1;
}

static struct nvmlDevice_st *mig_at(unsigned int gpu, unsigned int gi, unsigned int ci)
{
    for (unsigned int k = 0; k < nmigs; k++)
        if (migs[k].parent == gpu && migs[k].giId == gi && migs[k].ciId == ci) return &migs[k];
    return NULL;
}

static void drop_mig(unsigned int gpu, unsigned int gi, unsigned int ci)
{
    for (unsigned int k = 0; k < nmigs; k++)
        if (migs[k].parent == gpu && migs[k].giId == gi && migs[k].ciId == ci) {
            memmove(&migs[k], &migs[k + 1], (nmigs - k - 1) * sizeof migs[0]);
            nmigs--;
            return;
        }
}

static void add_mig(unsigned int gpu, unsigned int gi, unsigned int ci, unsigned int profileId,
                    unsigned int start, const char *uuid)
{
    struct nvmlDevice_st *g = device_at(gpu);
    int p = g ? profile_slot(g, profileId) : -1;
    if (p < 0) return;                     /* a profile the GPU does not offer: ignored */
    drop_mig(gpu, gi, ci);
    if (nmigs >= MAXMIG) return;
    struct nvmlDevice_st *m = &migs[nmigs++];
    memset(m, 0, sizeof *m);
    m->isMig = 1;
    m->parent = gpu; m->giId = gi; m->ciId = ci; m->giProfileId = profileId; m->giStart = start;
    m->minor = g->minor;
    m->memTotal = g->giProfile[p].memMiB << 20;
    snprintf(m->uuid, sizeof m->uuid, "%s", uuid);
    /* as NVML names a MIG device: the parent's name and the profile */
    snprintf(m->name, sizeof m->name, "%.60s %.30s", g->name, g->giProfile[p].name);
}

/* One line of the config file or of the control file (`control`: events too). */
static void apply_line(char *line, int control)
{
    unsigned int a, b, n, g, m, c, p, f;
    unsigned long long used;
    char word[64];
    struct nvmlDevice_st *d;
    line[strcspn(line, "\r\n")] = 0;
    if (line[0] == '#' || line[0] == 0) return;
    if (!strncmp(line, "driver ", 7)) {
        sscanf(line + 7, "%79s", driverVersion);
    } else if (!strncmp(line, "nvml ", 5)) {
        sscanf(line + 5, "%79s", nvmlVersion);
    } else if (!strncmp(line, "cuda ", 5)) {
        cudaVersion = atoi(line + 5);
    } else if (!strncmp(line, "topo ", 5)) {
        int lvl;
        if (sscanf(line + 5, "%u %u %d", &a, &b, &lvl) == 3 && a < MAXGPU && b < MAXGPU)
            topo[a][b] = topo[b][a] = lvl;
    } else if (!strncmp(line, "board ", 6)) {
        if (sscanf(line + 6, "%u %u", &a, &n) == 2 && (d = device_at(a))) d->boardId = n;
    } else if (!strncmp(line, "nvlink ", 7)) {
        if (sscanf(line + 7, "%u %u %u", &a, &b, &n) == 3 && a < ngpus && b < ngpus)
            for (unsigned int k = 0; k < n; k++) {
                if (gpus[a].nlinks < NVML_NVLINK_MAX_LINKS) gpus[a].linkPeer[gpus[a].nlinks++] = b;
                if (gpus[b].nlinks < NVML_NVLINK_MAX_LINKS) gpus[b].linkPeer[gpus[b].nlinks++] = a;
            }
    } else if (!strncmp(line, "nvswitch ", 9)) {
        if (sscanf(line + 9, "%u %u", &a, &n) == 2 && a < ngpus)
            for (unsigned int k = 0; k < n && gpus[a].nlinks < NVML_NVLINK_MAX_LINKS; k++)
                gpus[a].linkPeer[gpus[a].nlinks++] = SWITCH_PEER;
    } else if (!strcmp(line, "notopo")) {
        noTopology = 1;
    } else if (!strncmp(line, "util ", 5)) {
        if (sscanf(line + 5, "%u %u %u", &a, &g, &m) == 3 && (d = device_at(a))) { d->utilGpu = g; d->utilMem = m; }
    } else if (!strncmp(line, "proc ", 5)) {
        unsigned int sm = 0;
        if (sscanf(line + 5, "%u %u %llu %u", &a, &p, &used, &sm) >= 3 && (d = device_at(a)))
            set_proc(d, p, used, strstr(line + 5, " none") ? NO_SAMPLE : sm);
    } else if (!strncmp(line, "noproc ", 7)) {
        if (sscanf(line + 7, "%u %u", &a, &p) == 2 && (d = device_at(a))) drop_proc(d, p);
    } else if (!strncmp(line, "temp ", 5)) {
        unsigned int slow, shut;
        int k = sscanf(line + 5, "%u %u %u %u", &a, &c, &slow, &shut);
        if (k >= 2 && (d = device_at(a))) {
            d->temp = c;
            if (k == 4) { d->tempSlowdown = slow; d->tempShutdown = shut; }
        }
    } else if (!strncmp(line, "power ", 6)) {
        if (sscanf(line + 6, "%u %u", &a, &n) == 2 && (d = device_at(a))) d->powerMw = n;
    } else if (!strncmp(line, "retired ", 8)) {
        if (sscanf(line + 8, "%u %u %u %u", &a, &n, &m, &p) == 4 && (d = device_at(a))) {
            d->retired[0] = n; d->retired[1] = m; d->retiredPending = p;
        }
    } else if (!strncmp(line, "remap ", 6)) {
        if (sscanf(line + 6, "%u %u %u %u %u", &a, &n, &m, &p, &f) == 5 && (d = device_at(a))) {
            d->remapCorr = n; d->remapUnc = m; d->remapPending = p; d->remapFailure = f;
        }
    } else if (!strncmp(line, "mig ", 4)) {
        if (sscanf(line + 4, "%u %u %u", &a, &n, &m) == 3 && (d = device_at(a))) {
            d->migCapable = 1; d->migCurrent = n; d->migPending = m;
        }
    } else if (!strncmp(line, "giprofile ", 10)) {
        unsigned int id, slices, inst, sms;
        unsigned long long mem;
        int k = 0;
        if (sscanf(line + 10, "%u %u %u %u %u %u %llu %n", &a, &p, &id, &slices, &inst, &sms, &mem, &k) >= 7
            && k > 0 && (d = device_at(a)) && p < NVML_GPU_INSTANCE_PROFILE_COUNT) {
            d->giProfile[p].set = 1; d->giProfile[p].id = id; d->giProfile[p].slices = slices;
            d->giProfile[p].instances = inst; d->giProfile[p].sms = sms; d->giProfile[p].memMiB = mem;
            snprintf(d->giProfile[p].name, sizeof d->giProfile[p].name, "%s", line + 10 + k);
        }
    } else if (!strncmp(line, "migdev ", 7)) {
        unsigned int gi, ci, prof, start;
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        if (sscanf(line + 7, "%u %u %u %u %u %79s", &a, &gi, &ci, &prof, &start, uuid) == 6)
            add_mig(a, gi, ci, prof, start, uuid);
    } else if (!strncmp(line, "migproc ", 8)) {
        unsigned int gi, ci;
        if (sscanf(line + 8, "%u %u %u %u %llu", &a, &gi, &ci, &p, &used) == 5 && (d = mig_at(a, gi, ci)))
            set_proc(d, p, used, 0);
    } else if (!strncmp(line, "nomigproc ", 10)) {
        unsigned int gi, ci;
        if (sscanf(line + 10, "%u %u %u %u", &a, &gi, &ci, &p) == 4 && (d = mig_at(a, gi, ci)))
            drop_proc(d, p);
    } else if (control && !strncmp(line, "nomigdev ", 9)) {
        unsigned int gi, ci;
        if (sscanf(line + 9, "%u %u %u", &a, &gi, &ci) == 3) drop_mig(a, gi, ci);
    } else if (control && !strncmp(line, "xid ", 4)) {
        if (sscanf(line + 4, "%u %u", &a, &n) == 2 && (d = device_at(a)))
            push_event(d, nvmlEventTypeXidCriticalError, n);
    } else if (control && !strncmp(line, "ecc ", 4)) {
        n = 1;
        if (sscanf(line + 4, "%u %63s %u", &a, word, &n) >= 2 && (d = device_at(a))) {
            int dbe = !strcmp(word, "dbe");
            if (!dbe && strcmp(word, "sbe")) return;
            d->ecc[dbe][0] += n; d->ecc[dbe][1] += n;
            push_event(d, dbe ? nvmlEventTypeDoubleBitEccError : nvmlEventTypeSingleBitEccError, 0);
        }
    } else if (control && !strncmp(line, "lost ", 5)) {
        if (sscanf(line + 5, "%u", &a) == 1 && (d = device_at(a))) d->lost = 1;
    } else if (control && !strncmp(line, "found ", 6)) {
        if (sscanf(line + 6, "%u", &a) == 1 && (d = device_at(a))) d->lost = 0;
    } else if (control && !strncmp(line, "fail ", 5)) {
        int code, times = 0;
        if (sscanf(line + 5, "%63s %d %d", word, &code, &times) >= 2) {
            for (int k = 0; k < MAXFAULTS; k++)
                if (!faults[k].function[0] || !strcmp(faults[k].function, word)) {
                    snprintf(faults[k].function, sizeof faults[k].function, "%s", word);
                    faults[k].code = (nvmlReturn_t)code;
                    faults[k].remaining = times;
                    break;
                }
        }
    } else if (control && !strncmp(line, "delay ", 6)) {
        double seconds;
        int times = 0;
        if (sscanf(line + 6, "%63s %lf %d", word, &seconds, &times) >= 2 && seconds >= 0) {
            for (int k = 0; k < MAXFAULTS; k++)
                if (!delays[k].function[0] || !strcmp(delays[k].function, word)) {
                    snprintf(delays[k].function, sizeof delays[k].function, "%s", word);
                    delays[k].seconds = seconds;
                    delays[k].remaining = times;
                    break;
                }
        }
    } else if (control && !strncmp(line, "heal ", 5)) {
        if (sscanf(line + 5, "%63s", word) == 1)
            for (int k = 0; k < MAXFAULTS; k++) {
                if (!strcmp(faults[k].function, word)) faults[k].function[0] = 0;
                if (!strcmp(delays[k].function, word)) delays[k].function[0] = 0;
            }
    } else if (!strncmp(line, "gpu ", 4) && ngpus < MAXGPU) {
        d = &gpus[ngpus];
        int k = 0;
        memset(d, 0, sizeof *d);
        if (sscanf(line + 4, "%u %95s %31s %x %llu %d.%d %n", &d->minor, d->uuid,
                   d->busId, &d->pciDeviceId, &d->memTotal, &d->ccMajor, &d->ccMinor, &k) >= 7 && k > 0) {
            snprintf(d->name, sizeof d->name, "%s", line + 4 + k);
            d->index = ngpus;
            d->boardId = 0x100 + ngpus;   /* one board per GPU unless a board line says otherwise */
            d->temp = 35; d->tempSlowdown = 90; d->tempShutdown = 95;
            d->powerMw = 50000;
            ngpus++;
        }
    }
}

static void watch_control(const char *path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = 0; else if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");
    inotifyFd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotifyFd >= 0 && inotify_add_watch(inotifyFd, dir, IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0) {
        close(inotifyFd);
        inotifyFd = -1;
    }
}

/* Read what was appended to the control file since the last call. */
static void sync_control(void)
{
    const char *path = getenv("FAKE_NVML_CONTROL");
    if (!path || !*path) return;
    if (ctlFd < 0) {
        if (inotifyFd < 0) watch_control(path);
        ctlFd = open(path, O_RDONLY | O_CLOEXEC);
        if (ctlFd < 0) return;
    }
    char buf[4096];
    for (;;) {
        ssize_t got = pread(ctlFd, buf, sizeof buf, ctlOffset);
        if (got <= 0) return;
        ctlOffset += got;
        for (ssize_t k = 0; k < got; k++) {
            if (ctlPartialLen < sizeof ctlPartial - 1) ctlPartial[ctlPartialLen++] = buf[k];
            if (buf[k] == '\n') {
                ctlPartial[ctlPartialLen] = 0;
                apply_line(ctlPartial, 1);
                ctlPartialLen = 0;
            }
        }
    }
}

/* "nvmlDeviceGetHandleByIndex" names nvmlDeviceGetHandleByIndex_v2 too */
static int same_function(const char *named, const char *function)
{
    size_t n = strlen(named);
    if (strncmp(named, function, n)) return 0;
    if (function[n] == 0) return 1;
    if (function[n] != '_' || function[n + 1] != 'v' || !function[n + 2]) return 0;
    for (const char *c = function + n + 2; *c; c++) if (*c < '0' || *c > '9') return 0;
    return 1;
}

static nvmlReturn_t injected(const char *function)
{
    for (int k = 0; k < MAXFAULTS; k++) {
        struct fault *f = &faults[k];
        if (!f->function[0] || !same_function(f->function, function)) continue;
        nvmlReturn_t code = f->code;
        if (f->remaining > 0 && --f->remaining == 0) f->function[0] = 0;
        return code;
    }
    return NVML_SUCCESS;
}

/* A delayed call sleeps before it takes the library's lock: one stuck call, as a
   driver in trouble makes, holds up its own thread only. */
static void stall(const char *function)
{
    double seconds = 0;
    {
        LOCKED();
        sync_control();
        for (int k = 0; k < MAXFAULTS; k++) {
            struct delay *d = &delays[k];
            if (!d->function[0] || !same_function(d->function, function)) continue;
            seconds = d->seconds;
            if (d->remaining > 0 && --d->remaining == 0) d->function[0] = 0;
            break;
        }
    }
    if (seconds <= 0) return;
    struct timespec pause = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {}
}

static struct timespec configMtime;

static int config_changed(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    int changed = st.st_mtim.tv_sec != configMtime.tv_sec || st.st_mtim.tv_nsec != configMtime.tv_nsec;
    configMtime = st.st_mtim;
    return changed;
}

/* Another nvmlInit while one is held (a monitor keeps NVML open): the driver's
   versions are read again if the file changed (a driver reload), the GPUs are not;
   a file gone is a driver gone, for new inits. */
static nvmlReturn_t reload_versions(void)
{
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (!path || !*path || access(path, R_OK) != 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (!config_changed(path)) return NVML_SUCCESS;
    FILE *f = fopen(path, "r");
    if (!f) return NVML_ERROR_DRIVER_NOT_LOADED;
    char line[1024];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "driver ", 7) || !strncmp(line, "nvml ", 5) || !strncmp(line, "cuda ", 5))
            apply_line(line, 0);
    fclose(f);
    return NVML_SUCCESS;
}

static nvmlReturn_t load_config(void)
{
    const char *err = getenv("FAKE_NVML_INIT_ERROR");
    if (err && *err) return (nvmlReturn_t)atoi(err);
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (!path || !*path) return NVML_ERROR_DRIVER_NOT_LOADED;
    FILE *f = fopen(path, "r");
    if (!f) return NVML_ERROR_DRIVER_NOT_LOADED;
    config_changed(path);
    ngpus = 0;
    nmigs = 0;
    for (int i = 0; i < MAXGPU; i++)
        for (int j = 0; j < MAXGPU; j++)
            topo[i][j] = (i == j) ? NVML_TOPOLOGY_INTERNAL : NVML_TOPOLOGY_SYSTEM;
    noTopology = 0;
    memset(sets, 0, sizeof sets);
    memset(faults, 0, sizeof faults);
    memset(delays, 0, sizeof delays);
    char line[1024];
    while (fgets(line, sizeof line, f)) apply_line(line, 0);
    fclose(f);
    /* the control file is read again from its start: the state its lines made */
    if (ctlFd >= 0) { close(ctlFd); ctlFd = -1; }
    ctlOffset = 0;
    ctlPartialLen = 0;
    sync_control();
    return NVML_SUCCESS;
}

/* Every entry point: the lock, the control file, an injected failure. */
#define ENTER() stall(__func__); LOCKED(); sync_control(); do { nvmlReturn_t f_ = injected(__func__); if (f_ != NVML_SUCCESS) return f_; } while (0)
#define CHECK_INIT() do { if (initCount <= 0) return NVML_ERROR_UNINITIALIZED; } while (0)
#define CHECK_DEV(d) do { CHECK_INIT(); if (!(d) || (d) < gpus || (d) >= gpus + ngpus) return NVML_ERROR_INVALID_ARGUMENT; \
                          if ((d)->lost) return NVML_ERROR_GPU_IS_LOST; } while (0)
/* A GPU or a MIG device (whose parent's loss is its own). */
#define CHECK_ANY(d) do { CHECK_INIT(); if (!valid_handle(d)) return NVML_ERROR_INVALID_ARGUMENT; \
                          if ((d)->lost || ((d)->isMig && gpus[(d)->parent].lost)) return NVML_ERROR_GPU_IS_LOST; } while (0)

static int valid_handle(nvmlDevice_t d)
{
    return d && ((d >= gpus && d < gpus + ngpus) || (d >= migs && d < migs + nmigs));
}

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src)
{
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    stall("nvmlInit");
    LOCKED();
    if (initCount == 0) {
        nvmlReturn_t r = load_config();
        if (r != NVML_SUCCESS) return r;
    } else {
        nvmlReturn_t r = reload_versions();
        if (r != NVML_SUCCESS) return r;
        sync_control();
    }
    nvmlReturn_t f = injected("nvmlInit");
    if (f != NVML_SUCCESS) return f;
    initCount++;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void)
{
    LOCKED();
    CHECK_INIT();
    initCount--;
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
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{ ENTER(); CHECK_INIT(); return copy_str(version, length, driverVersion); }

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{ ENTER(); CHECK_INIT(); return copy_str(version, length, nvmlVersion); }

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{ ENTER(); CHECK_INIT(); if (!v) return NVML_ERROR_INVALID_ARGUMENT; *v = cudaVersion; return NVML_SUCCESS; }

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{ return nvmlSystemGetCudaDriverVersion(v); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{ ENTER(); CHECK_INIT(); if (!count) return NVML_ERROR_INVALID_ARGUMENT; *count = ngpus; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    ENTER();
    CHECK_INIT();
    if (!device || index >= ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    if (gpus[index].lost) return NVML_ERROR_GPU_IS_LOST;
    *device = &gpus[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{ return nvmlDeviceGetHandleByIndex_v2(index, device); }

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    ENTER();
    CHECK_INIT();
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < ngpus; i++)
        if (!strcmp(gpus[i].uuid, uuid)) {
            if (gpus[i].lost) return NVML_ERROR_GPU_IS_LOST;
            *device = &gpus[i];
            return NVML_SUCCESS;
        }
    for (unsigned int k = 0; k < nmigs; k++)           /* NVML takes a MIG- UUID too */
        if (!strcmp(migs[k].uuid, uuid)) {
            if (gpus[migs[k].parent].lost) return NVML_ERROR_GPU_IS_LOST;
            *device = &migs[k];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor)
{ ENTER(); CHECK_DEV(d); if (!minor) return NVML_ERROR_INVALID_ARGUMENT; *minor = d->minor; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index)
{ ENTER(); CHECK_DEV(d); if (!index) return NVML_ERROR_INVALID_ARGUMENT; *index = d->index; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{ ENTER(); CHECK_ANY(d); return copy_str(uuid, length, d->uuid); }

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{ ENTER(); CHECK_ANY(d); return copy_str(name, length, d->name); }

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    ENTER();
    CHECK_DEV(d);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    unsigned int dom = 0, bus = 0, dev = 0, fn = 0;
    sscanf(d->busId, "%x:%x:%x.%x", &dom, &bus, &dev, &fn);
    pci->domain = dom; pci->bus = bus; pci->device = dev;
    pci->pciDeviceId = d->pciDeviceId;
    pci->pciSubSystemId = 0;
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, dom, bus, dev);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, dom, bus, dev);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(d, p); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(d, p); }

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *mem)
{
    ENTER();
    CHECK_ANY(d);
    if (!mem) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long used = 0;
    for (unsigned int i = 0; i < d->nprocs; i++) used += d->procUsed[i];
    if (used > d->memTotal) used = d->memTotal;
    mem->total = d->memTotal;
    mem->used = used;
    mem->free = d->memTotal - used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
    ENTER();
    CHECK_DEV(d);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = d->ccMajor; *minor = d->ccMinor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuTopologyLevel_t *level)
{
    ENTER();
    CHECK_DEV(a); CHECK_DEV(b);
    if (!level) return NVML_ERROR_INVALID_ARGUMENT;
    if (noTopology) return NVML_ERROR_NOT_SUPPORTED;
    *level = (nvmlGpuTopologyLevel_t)topo[a->index][b->index];
    return NVML_SUCCESS;
}

/* As NVML: the GPUs (other than `d`) whose common ancestor with it is at `level` or
   nearer; *count 0 asks how many, else up to *count handles are written. */
nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t d, nvmlGpuTopologyLevel_t level,
                                              unsigned int *count, nvmlDevice_t *deviceArray)
{
    ENTER();
    CHECK_DEV(d);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (noTopology) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int n = 0;
    for (unsigned int i = 0; i < ngpus; i++) {
        if (i == d->index || gpus[i].lost || topo[d->index][i] > (int)level) continue;
        if (*count == 0) { n++; continue; }
        if (!deviceArray) return NVML_ERROR_INVALID_ARGUMENT;
        if (n < *count) deviceArray[n++] = &gpus[i];
    }
    *count = n;
    return NVML_SUCCESS;
}

static int nvlinked(nvmlDevice_t a, nvmlDevice_t b)
{
    int toSwitch[2] = {0, 0};
    for (unsigned int k = 0; k < a->nlinks; k++) {
        if (a->linkPeer[k] == b->index) return 1;
        toSwitch[0] |= a->linkPeer[k] == SWITCH_PEER;
    }
    for (unsigned int k = 0; k < b->nlinks; k++) toSwitch[1] |= b->linkPeer[k] == SWITCH_PEER;
    return toSwitch[0] && toSwitch[1];
}

/* Peer-to-peer between two GPUs: over NVLink when linked directly or through the
   switches; over PCIe unless the path crosses the CPUs' interconnect (SYS). */
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuP2PCapsIndex_t p2pIndex,
                                    nvmlGpuP2PStatus_t *p2pStatus)
{
    ENTER();
    CHECK_DEV(a); CHECK_DEV(b);
    if (!p2pStatus || p2pIndex >= NVML_P2P_CAPS_INDEX_UNKNOWN) return NVML_ERROR_INVALID_ARGUMENT;
    if (noTopology) return NVML_ERROR_NOT_SUPPORTED;
    int nv = a != b && nvlinked(a, b);
    int pcie = a != b && topo[a->index][b->index] < NVML_TOPOLOGY_SYSTEM;
    switch (p2pIndex) {
    case NVML_P2P_CAPS_INDEX_NVLINK:
    case NVML_P2P_CAPS_INDEX_ATOMICS:
        *p2pStatus = nv ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
    case NVML_P2P_CAPS_INDEX_PCI:
        *p2pStatus = pcie ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
        break;
    default:                                   /* READ, WRITE: by either path */
        *p2pStatus = nv || pcie ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t d, unsigned int *boardId)
{ ENTER(); CHECK_DEV(d); if (!boardId) return NVML_ERROR_INVALID_ARGUMENT; *boardId = d->boardId; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t d, unsigned int *multiGpuBool)
{
    ENTER();
    CHECK_DEV(d);
    if (!multiGpuBool) return NVML_ERROR_INVALID_ARGUMENT;
    *multiGpuBool = 0;
    for (unsigned int i = 0; i < ngpus; i++)
        if (&gpus[i] != d && gpus[i].boardId == d->boardId) *multiGpuBool = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    ENTER();
    CHECK_ANY(d);
    if (d->isMig) return NVML_ERROR_NOT_SUPPORTED;     /* as NVML: none per MIG device */
    if (!u) return NVML_ERROR_INVALID_ARGUMENT;
    u->gpu = d->utilGpu; u->memory = d->utilMem;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
    ENTER();
    CHECK_ANY(d);                                     /* a MIG device lists its own */
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->nprocs == 0) { *count = 0; return NVML_SUCCESS; }
    if (!infos || *count < d->nprocs) { *count = d->nprocs; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (unsigned int i = 0; i < d->nprocs; i++) {
        memset(&infos[i], 0, sizeof infos[i]);
        infos[i].pid = d->procPid[i];
        infos[i].usedGpuMemory = d->procUsed[i];
        infos[i].gpuInstanceId = d->isMig ? d->giId : 0xFFFFFFFF;
        infos[i].computeInstanceId = d->isMig ? d->ciId : 0xFFFFFFFF;
    }
    *count = d->nprocs;
    return NVML_SUCCESS;
}

static unsigned long long now_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp)
{
    (void)lastSeenTimeStamp;
    ENTER();
    CHECK_ANY(d);
    if (d->isMig) return NVML_ERROR_NOT_SUPPORTED;     /* as NVML: none per MIG device */
    if (!processSamplesCount) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int sampled = 0;
    for (unsigned int i = 0; i < d->nprocs; i++)
        sampled += d->procSm[i] != NO_SAMPLE;
    if (sampled == 0) return NVML_ERROR_NOT_FOUND;           /* as NVML: no sample entries */
    if (!utilization || *processSamplesCount < sampled) {
        *processSamplesCount = sampled;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned long long stamp = now_us();
    unsigned int n = 0;
    for (unsigned int i = 0; i < d->nprocs; i++) {
        if (d->procSm[i] == NO_SAMPLE) continue;
        memset(&utilization[n], 0, sizeof utilization[n]);
        utilization[n].pid = d->procPid[i];
        utilization[n].timeStamp = stamp;
        utilization[n].smUtil = d->procSm[i];
        n++;
    }
    *processSamplesCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, nvmlEnableState_t *isActive)
{
    ENTER();
    CHECK_DEV(d);
    if (!isActive || link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->nlinks == 0 || noTopology) return NVML_ERROR_NOT_SUPPORTED;   /* GPUs without NVLink */
    *isActive = link < d->nlinks ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci)
{
    ENTER();
    CHECK_DEV(d);
    if (!pci || link >= d->nlinks) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->linkPeer[link] != SWITCH_PEER) return nvmlDeviceGetPciInfo_v3(&gpus[d->linkPeer[link]], pci);
    /* an NVSwitch: one of NVSWITCHES bridges of vendor 10de, device 22a3 (an H100's) */
    memset(pci, 0, sizeof *pci);
    pci->bus = 0xC1 + (link % NVSWITCHES);
    pci->pciDeviceId = 0x22A310DE;
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, 0u, pci->bus, 0u);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, 0u, pci->bus, 0u);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, nvmlIntNvLinkDeviceType_t *type)
{
    ENTER();
    CHECK_DEV(d);
    if (!type || link >= d->nlinks) return NVML_ERROR_INVALID_ARGUMENT;
    *type = d->linkPeer[link] == SWITCH_PEER ? NVML_NVLINK_DEVICE_TYPE_SWITCH : NVML_NVLINK_DEVICE_TYPE_GPU;
    return NVML_SUCCESS;
}

/* --- health: temperature, power, ECC, retired pages, remapped rows ---------------------- */

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, nvmlTemperatureSensors_t sensor, unsigned int *temp)
{
    ENTER();
    CHECK_DEV(d);
    if (!temp || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = d->temp;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t d, nvmlTemperature_t *temperature)
{
    ENTER();
    CHECK_DEV(d);
    if (!temperature || temperature->sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    temperature->temperature = (int)d->temp;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d, nvmlTemperatureThresholds_t type, unsigned int *temp)
{
    ENTER();
    CHECK_DEV(d);
    if (!temp) return NVML_ERROR_INVALID_ARGUMENT;
    if (type == NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) *temp = d->tempShutdown;
    else if (type == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) *temp = d->tempSlowdown;
    else return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power)
{ ENTER(); CHECK_DEV(d); if (!power) return NVML_ERROR_INVALID_ARGUMENT; *power = d->powerMw; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    ENTER();
    CHECK_DEV(d);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    ENTER();
    CHECK_DEV(d);
    if (!eccCounts || (unsigned)errorType > 1 || (unsigned)counterType > 1) return NVML_ERROR_INVALID_ARGUMENT;
    *eccCounts = d->ecc[errorType][counterType];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, nvmlPageRetirementCause_t cause,
                                       unsigned int *pageCount, unsigned long long *addresses)
{
    ENTER();
    CHECK_DEV(d);
    if (!pageCount || (unsigned)cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int have = d->retired[cause];
    if (!addresses || *pageCount < have) {
        *pageCount = have;
        return (addresses || have) ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    for (unsigned int k = 0; k < have; k++) addresses[k] = 0x100000ULL * (k + 1) + cause;
    *pageCount = have;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, nvmlEnableState_t *isPending)
{
    ENTER();
    CHECK_DEV(d);
    if (!isPending) return NVML_ERROR_INVALID_ARGUMENT;
    *isPending = d->retiredPending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred)
{
    ENTER();
    CHECK_DEV(d);
    if (!corrRows || !uncRows || !isPending || !failureOccurred) return NVML_ERROR_INVALID_ARGUMENT;
    *corrRows = d->remapCorr; *uncRows = d->remapUnc;
    *isPending = d->remapPending; *failureOccurred = d->remapFailure;
    return NVML_SUCCESS;
}

/* --- events ------------------------------------------------------------------------------- */

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    ENTER();
    CHECK_INIT();
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    for (int s = 0; s < MAXSETS; s++)
        if (!sets[s].used) {
            memset(&sets[s], 0, sizeof sets[s]);
            sets[s].used = 1;
            *set = (nvmlEventSet_t)&sets[s];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
}

static struct event_set *set_of(nvmlEventSet_t set)
{
    struct event_set *s = (struct event_set *)set;
    return (s >= sets && s < sets + MAXSETS && s->used) ? s : NULL;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    ENTER();
    CHECK_INIT();
    struct event_set *s = set_of(set);
    if (!s) return NVML_ERROR_INVALID_ARGUMENT;
    s->used = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *eventTypes)
{ ENTER(); CHECK_DEV(d); if (!eventTypes) return NVML_ERROR_INVALID_ARGUMENT; *eventTypes = SUPPORTED_EVENTS; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long eventTypes, nvmlEventSet_t set)
{
    ENTER();
    CHECK_DEV(d);
    struct event_set *s = set_of(set);
    if (!s) return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~SUPPORTED_EVENTS) return NVML_ERROR_NOT_SUPPORTED;
    s->types[d->index] |= eventTypes;
    return NVML_SUCCESS;
}

/* One look at the set under the lock: an event, or NVML_ERROR_TIMEOUT for "none yet". */
static nvmlReturn_t take_event(nvmlEventSet_t set, nvmlEventData_t *data)
{
    ENTER();
    CHECK_INIT();
    struct event_set *s = set_of(set);
    if (!s || !data) return NVML_ERROR_INVALID_ARGUMENT;
    if (s->count == 0) return NVML_ERROR_TIMEOUT;
    *data = s->queue[s->head];
    s->head = (s->head + 1) % MAXQUEUE;
    s->count--;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    stall("nvmlEventSetWait");
    {
        LOCKED();
        sync_control();
        nvmlReturn_t f = injected("nvmlEventSetWait");
        if (f != NVML_SUCCESS) return f;
    }
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        nvmlReturn_t r = take_event(set, data);
        if (r != NVML_ERROR_TIMEOUT) return r;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long waited = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (waited >= (long)timeoutms) return NVML_ERROR_TIMEOUT;
        long slice = (long)timeoutms - waited;
        /* the control file's directory wakes us; another thread's read of it may have
           queued the event without our seeing the inotify event, hence the cap */
        if (slice > 100) slice = 100;
        if (inotifyFd >= 0) {
            struct pollfd p = {inotifyFd, POLLIN, 0};
            if (poll(&p, 1, (int)slice) > 0) {
                char buf[4096];
                while (read(inotifyFd, buf, sizeof buf) > 0) {}
            }
        } else {
            struct timespec pause = {0, (slice < 20 ? slice : 20) * 1000000L};
            nanosleep(&pause, NULL);
        }
    }
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{ return nvmlEventSetWait_v2(set, data, timeoutms); }

/* --- MIG (Multi-Instance GPU), read only: the layout is the operator's ------------------- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *currentMode, unsigned int *pendingMode)
{
    ENTER();
    CHECK_DEV(d);
    if (!currentMode || !pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->migCapable) return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = d->migCurrent; *pendingMode = d->migPending;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, nvmlComputeMode_t *mode)
{
    ENTER();
    CHECK_DEV(d);
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = (nvmlComputeMode_t)computeModes[d - gpus];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t d, nvmlComputeMode_t mode)
{
    ENTER();
    CHECK_DEV(d);
    /* EXCLUSIVE_THREAD (1) is gone from current drivers: the real one refuses it too */
    if ((unsigned int)mode >= NVML_COMPUTEMODE_COUNT || mode == NVML_COMPUTEMODE_EXCLUSIVE_THREAD)
        return NVML_ERROR_INVALID_ARGUMENT;
    computeModes[d - gpus] = (unsigned int)mode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count)
{
    ENTER();
    CHECK_DEV(d);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;                                 /* zero when MIG is not supported or enabled */
    if (d->migCapable && d->migCurrent == NVML_DEVICE_MIG_ENABLE)
        for (int p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; p++)
            if (d->giProfile[p].set && d->giProfile[p].instances > *count) *count = d->giProfile[p].instances;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *migDevice)
{
    ENTER();
    CHECK_DEV(d);
    if (!migDevice) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->migCapable || d->migCurrent != NVML_DEVICE_MIG_ENABLE) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int seen = 0;
    for (unsigned int k = 0; k < nmigs; k++)
        if (migs[k].parent == d->index && seen++ == index) { *migDevice = &migs[k]; return NVML_SUCCESS; }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *isMigDevice)
{ ENTER(); CHECK_ANY(d); if (!isMigDevice) return NVML_ERROR_INVALID_ARGUMENT; *isMigDevice = (unsigned int)d->isMig; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id)
{
    ENTER();
    CHECK_ANY(d);
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->isMig) return NVML_ERROR_NOT_SUPPORTED;
    *id = d->giId;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id)
{
    ENTER();
    CHECK_ANY(d);
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->isMig) return NVML_ERROR_NOT_SUPPORTED;
    *id = d->ciId;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    ENTER();
    CHECK_ANY(migDevice);
    if (!device || !migDevice->isMig) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[migDevice->parent];
    return NVML_SUCCESS;
}

/* The profile at NVML_GPU_INSTANCE_PROFILE_* index `profile`, or why not. */
static nvmlReturn_t gi_profile(nvmlDevice_t d, unsigned int profile, int *slot)
{
    if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->migCapable || !d->giProfile[profile].set) return NVML_ERROR_NOT_SUPPORTED;
    *slot = (int)profile;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info)
{
    ENTER();
    CHECK_DEV(d);
    int p;
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = gi_profile(d, profile, &p);
    if (r != NVML_SUCCESS) return r;
    memset(info, 0, sizeof *info);
    info->id = d->giProfile[p].id;
    info->sliceCount = d->giProfile[p].slices;
    info->instanceCount = d->giProfile[p].instances;
    info->multiprocessorCount = d->giProfile[p].sms;
    info->memorySizeMB = d->giProfile[p].memMiB;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t d, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info)
{
    ENTER();
    CHECK_DEV(d);
    int p;
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t r = gi_profile(d, profile, &p);
    if (r != NVML_SUCCESS) return r;
    memset(info, 0, sizeof *info);
    info->version = nvmlGpuInstanceProfileInfo_v2;
    info->id = d->giProfile[p].id;
    info->sliceCount = d->giProfile[p].slices;
    info->instanceCount = d->giProfile[p].instances;
    info->multiprocessorCount = d->giProfile[p].sms;
    info->memorySizeMB = d->giProfile[p].memMiB;
    snprintf(info->name, sizeof info->name, "%s", d->giProfile[p].name);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned int id, nvmlGpuInstance_t *gpuInstance)
{
    ENTER();
    CHECK_DEV(d);
    if (!gpuInstance) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->migCapable || d->migCurrent != NVML_DEVICE_MIG_ENABLE) return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned int k = 0; k < nmigs; k++)
        if (migs[k].parent == d->index && migs[k].giId == id) {
            gis[k].slot = k;
            *gpuInstance = &gis[k];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    ENTER();
    CHECK_INIT();
    if (!info || !gpuInstance || gpuInstance < gis || gpuInstance >= gis + nmigs) return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlDevice_st *m = &migs[gpuInstance->slot];
    struct nvmlDevice_st *g = &gpus[m->parent];
    int p = profile_slot(g, m->giProfileId);
    memset(info, 0, sizeof *info);
    info->device = g;
    info->id = m->giId;
    info->profileId = m->giProfileId;
    info->placement.start = m->giStart;
    info->placement.size = p >= 0 ? g->giProfile[p].slices : 0;
    return NVML_SUCCESS;
}
