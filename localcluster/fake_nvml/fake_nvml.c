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
 *   util <i> <gpu%> <mem%>        (utilization rates)
 *   proc <i> <pid> <usedBytes>    (a compute process on GPU i; memory used is their sum)
 * <i>, <j> are NVML indices (the order of the gpu lines).
 * Lines starting with '#' are ignored.
 * $FAKE_NVML_INIT_ERROR=<nvmlReturn_t code> makes init fail (e.g. 9 = DRIVER_NOT_LOADED).
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1   /* declare both nvmlInit and nvmlInit_v2 etc. */
#include <nvml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXGPU 64

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
    unsigned int procPid[16];
    unsigned long long procUsed[16];
    unsigned int nlinks;            /* active NVLinks; link k goes to linkPeer[k] */
    unsigned int linkPeer[NVML_NVLINK_MAX_LINKS];
};

static struct nvmlDevice_st gpus[MAXGPU];
static unsigned int ngpus;
static int topo[MAXGPU][MAXGPU];
static char driverVersion[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "0.0";
static char nvmlVersion[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = "0.0";
static int cudaVersion;
static int initCount;

static nvmlReturn_t load_config(void)
{
    const char *err = getenv("FAKE_NVML_INIT_ERROR");
    if (err && *err) return (nvmlReturn_t)atoi(err);
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (!path || !*path) return NVML_ERROR_DRIVER_NOT_LOADED;
    FILE *f = fopen(path, "r");
    if (!f) return NVML_ERROR_DRIVER_NOT_LOADED;
    ngpus = 0;
    for (int i = 0; i < MAXGPU; i++)
        for (int j = 0; j < MAXGPU; j++)
            topo[i][j] = (i == j) ? NVML_TOPOLOGY_INTERNAL : NVML_TOPOLOGY_SYSTEM;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] == '#' || line[0] == 0) continue;
        if (!strncmp(line, "driver ", 7)) {
            sscanf(line + 7, "%79s", driverVersion);
        } else if (!strncmp(line, "nvml ", 5)) {
            sscanf(line + 5, "%79s", nvmlVersion);
        } else if (!strncmp(line, "cuda ", 5)) {
            cudaVersion = atoi(line + 5);
        } else if (!strncmp(line, "topo ", 5)) {
            unsigned int a, b; int lvl;
            if (sscanf(line + 5, "%u %u %d", &a, &b, &lvl) == 3 && a < MAXGPU && b < MAXGPU)
                topo[a][b] = topo[b][a] = lvl;
        } else if (!strncmp(line, "board ", 6)) {
            unsigned int a, id;
            if (sscanf(line + 6, "%u %u", &a, &id) == 2 && a < ngpus) gpus[a].boardId = id;
        } else if (!strncmp(line, "nvlink ", 7)) {
            unsigned int a, b, n;
            if (sscanf(line + 7, "%u %u %u", &a, &b, &n) == 3 && a < ngpus && b < ngpus)
                for (unsigned int k = 0; k < n; k++) {
                    if (gpus[a].nlinks < NVML_NVLINK_MAX_LINKS) gpus[a].linkPeer[gpus[a].nlinks++] = b;
                    if (gpus[b].nlinks < NVML_NVLINK_MAX_LINKS) gpus[b].linkPeer[gpus[b].nlinks++] = a;
                }
        } else if (!strncmp(line, "util ", 5)) {
            unsigned int a, g, m;
            if (sscanf(line + 5, "%u %u %u", &a, &g, &m) == 3 && a < ngpus) { gpus[a].utilGpu = g; gpus[a].utilMem = m; }
        } else if (!strncmp(line, "proc ", 5)) {
            unsigned int a, pid; unsigned long long used;
            if (sscanf(line + 5, "%u %u %llu", &a, &pid, &used) == 3 && a < ngpus && gpus[a].nprocs < 16) {
                gpus[a].procPid[gpus[a].nprocs] = pid;
                gpus[a].procUsed[gpus[a].nprocs++] = used;
            }
        } else if (!strncmp(line, "gpu ", 4) && ngpus < MAXGPU) {
            struct nvmlDevice_st *d = &gpus[ngpus];
            int n = 0;
            memset(d, 0, sizeof *d);
            if (sscanf(line + 4, "%u %95s %31s %x %llu %d.%d %n", &d->minor, d->uuid,
                       d->busId, &d->pciDeviceId, &d->memTotal, &d->ccMajor, &d->ccMinor, &n) >= 7 && n > 0) {
                snprintf(d->name, sizeof d->name, "%s", line + 4 + n);
                d->index = ngpus;
                d->boardId = 0x100 + ngpus;   /* one board per GPU unless a board line says otherwise */
                ngpus++;
            }
        }
    }
    fclose(f);
    return NVML_SUCCESS;
}

#define CHECK_INIT() do { if (initCount <= 0) return NVML_ERROR_UNINITIALIZED; } while (0)
#define CHECK_DEV(d) do { CHECK_INIT(); if (!(d) || (d) < gpus || (d) >= gpus + ngpus) return NVML_ERROR_INVALID_ARGUMENT; } while (0)

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
    if (initCount == 0) {
        nvmlReturn_t r = load_config();
        if (r != NVML_SUCCESS) return r;
    }
    initCount++;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void)
{
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
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{ CHECK_INIT(); return copy_str(version, length, driverVersion); }

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{ CHECK_INIT(); return copy_str(version, length, nvmlVersion); }

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{ CHECK_INIT(); if (!v) return NVML_ERROR_INVALID_ARGUMENT; *v = cudaVersion; return NVML_SUCCESS; }

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{ return nvmlSystemGetCudaDriverVersion(v); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{ CHECK_INIT(); if (!count) return NVML_ERROR_INVALID_ARGUMENT; *count = ngpus; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    CHECK_INIT();
    if (!device || index >= ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{ return nvmlDeviceGetHandleByIndex_v2(index, device); }

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    CHECK_INIT();
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < ngpus; i++)
        if (!strcmp(gpus[i].uuid, uuid)) { *device = &gpus[i]; return NVML_SUCCESS; }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor)
{ CHECK_DEV(d); if (!minor) return NVML_ERROR_INVALID_ARGUMENT; *minor = d->minor; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index)
{ CHECK_DEV(d); if (!index) return NVML_ERROR_INVALID_ARGUMENT; *index = d->index; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{ CHECK_DEV(d); return copy_str(uuid, length, d->uuid); }

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{ CHECK_DEV(d); return copy_str(name, length, d->name); }

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
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
    CHECK_DEV(d);
    if (!mem) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long used = 0;
    for (unsigned int i = 0; i < d->nprocs; i++) used += d->procUsed[i];
    mem->total = d->memTotal;
    mem->used = used;
    mem->free = d->memTotal - used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
    CHECK_DEV(d);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = d->ccMajor; *minor = d->ccMinor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuTopologyLevel_t *level)
{
    CHECK_DEV(a); CHECK_DEV(b);
    if (!level) return NVML_ERROR_INVALID_ARGUMENT;
    *level = (nvmlGpuTopologyLevel_t)topo[a->index][b->index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t d, unsigned int *boardId)
{ CHECK_DEV(d); if (!boardId) return NVML_ERROR_INVALID_ARGUMENT; *boardId = d->boardId; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t d, unsigned int *multiGpuBool)
{
    CHECK_DEV(d);
    if (!multiGpuBool) return NVML_ERROR_INVALID_ARGUMENT;
    *multiGpuBool = 0;
    for (unsigned int i = 0; i < ngpus; i++)
        if (&gpus[i] != d && gpus[i].boardId == d->boardId) *multiGpuBool = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    CHECK_DEV(d);
    if (!u) return NVML_ERROR_INVALID_ARGUMENT;
    u->gpu = d->utilGpu; u->memory = d->utilMem;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
    CHECK_DEV(d);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->nprocs == 0) { *count = 0; return NVML_SUCCESS; }
    if (!infos || *count < d->nprocs) { *count = d->nprocs; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (unsigned int i = 0; i < d->nprocs; i++) {
        memset(&infos[i], 0, sizeof infos[i]);
        infos[i].pid = d->procPid[i];
        infos[i].usedGpuMemory = d->procUsed[i];
        infos[i].gpuInstanceId = 0xFFFFFFFF;
        infos[i].computeInstanceId = 0xFFFFFFFF;
    }
    *count = d->nprocs;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, nvmlEnableState_t *isActive)
{
    CHECK_DEV(d);
    if (!isActive || link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->nlinks == 0) return NVML_ERROR_NOT_SUPPORTED;   /* as on GPUs without NVLink */
    *isActive = link < d->nlinks ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci)
{
    CHECK_DEV(d);
    if (!pci || link >= d->nlinks) return NVML_ERROR_INVALID_ARGUMENT;
    return nvmlDeviceGetPciInfo_v3(&gpus[d->linkPeer[link]], pci);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, nvmlIntNvLinkDeviceType_t *type)
{
    CHECK_DEV(d);
    if (!type || link >= d->nlinks) return NVML_ERROR_INVALID_ARGUMENT;
    *type = NVML_NVLINK_DEVICE_TYPE_GPU;
    return NVML_SUCCESS;
}
