/* replay_main.c - a main() for the fuzz targets without libFuzzer: runs LLVMFuzzerTestOneInput
 * once on each file named (directories: each regular file in them), so the committed seed and
 * regression corpora run as ctest cases in every build (GCC, Release and ASan + UBSan). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "replay: cannot open %s\n", path), -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
        fclose(f);
        free(buf);
        return fprintf(stderr, "replay: cannot read %s\n", path), -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    int n = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) return fprintf(stderr, "replay: no %s\n", argv[i]), 1;
        if (!S_ISDIR(st.st_mode)) {
            if (replay_file(argv[i])) return 1;
            n++;
            continue;
        }
        struct dirent **ents;
        int k = scandir(argv[i], &ents, NULL, alphasort);
        for (int j = 0; j < k; j++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], ents[j]->d_name);
            if (ents[j]->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
                if (replay_file(p)) return 1;
                n++;
            }
            free(ents[j]);
        }
        free(ents);
    }
    printf("replayed %d inputs\n", n);
    return n > 0 ? 0 : 1;
}
