/* What a task's dynamic loader does with the CUDA driver: load libcuda.so.1 by
 * its soname (as PyTorch, TensorFlow and the CUDA runtime do), say which file it
 * mapped (from /proc/self/maps), and what cuInit and cuDeviceGetCount answer.
 * One JSON line on stdout. Exit 0 when the library loaded, 2 when it did not.
 * Built dynamically against glibc on purpose: the loader's search
 * (LD_LIBRARY_PATH, ld.so.cache) is what is being looked at. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static void json_string(const char *s) {
    putchar('"');
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        if ((unsigned char)*s < 0x20) { printf("\\u%04x", *s); continue; }
        putchar(*s);
    }
    putchar('"');
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "libcuda.so.1";
    void *lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        printf("{\"loaded\": false, \"error\": ");
        json_string(dlerror());
        printf("}\n");
        return 2;
    }
    char mapped[4096] = "", line[4608];
    FILE *maps = fopen("/proc/self/maps", "r");
    while (maps && fgets(line, sizeof line, maps)) {
        char *path = strchr(line, '/');
        if (path && strstr(path, "/libcuda.so")) {
            path[strcspn(path, "\n")] = 0;
            snprintf(mapped, sizeof mapped, "%s", path);
            break;
        }
    }
    if (maps) fclose(maps);
    int (*get_version)(int *) = (int (*)(int *))dlsym(lib, "cuDriverGetVersion");
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(lib, "cuDeviceGetCount");
    int version = 0, devices = -1, init_result = -1;
    if (get_version) get_version(&version);
    if (init) init_result = init(0);
    if (init_result == 0 && count) count(&devices);
    printf("{\"loaded\": true, \"libcuda\": ");
    json_string(mapped);
    printf(", \"cuda_driver_api\": %d, \"cuInit\": %d, \"devices\": %d}\n",
           version, init_result, devices);
    return 0;
}
