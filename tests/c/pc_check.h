/*
 * What the MPI test programs (tests/c/mpi_*.c) and bench/mpi_comms.c share: the seeded byte
 * pattern every broadcast carries, its check, and counts of this process's threads and
 * descriptors. Included by a relative path ("pc_check.h", "../tests/c/pc_check.h"), so any
 * mpicc that compiles the file from the repository finds it.
 */
#ifndef PC_CHECK_H
#define PC_CHECK_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Byte i of broadcast `seed`'s message. */
static inline unsigned char pattern(size_t i, unsigned seed)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
    x ^= x >> 31;
    return (unsigned char)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

/* 0 if buf holds broadcast `seed`'s first len bytes, else 1 and "WRONG DATA" on stderr. */
static inline int check(const unsigned char *buf, size_t len, unsigned seed, int rank,
                        const char *what)
{
    size_t bad = 0;
    for (size_t i = 0; i < len; i++) bad += buf[i] != pattern(i, seed);
    if (bad == 0) return 0;
    fprintf(stderr, "WRONG DATA rank %d %s (seed %u): %zu of %zu bytes\n", rank, what, seed, bad,
            len);
    return 1;
}

/* Entries of /proc/self/task (threads) or /proc/self/fd (descriptors, less the one that reads
 * it) whose name passes `keep` (NULL: all); -1 if the directory cannot be read. */
static inline int count_dir(const char *path, int (*keep)(const char *name))
{
    DIR *d = opendir(path);
    if (d == NULL) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        n += keep == NULL || keep(e->d_name);
    }
    closedir(d);
    return n - (strcmp(path, "/proc/self/fd") == 0);
}

/* Whether thread `task` of this process is one of pipecast's ("pipecast-progress-…"). */
static inline int pipecast_thread(const char *task)
{
    char path[64], name[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", task);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    if (fgets(name, sizeof name, f) == NULL) name[0] = '\0';
    fclose(f);
    return strncmp(name, "pipecast", 8) == 0;
}

#endif
