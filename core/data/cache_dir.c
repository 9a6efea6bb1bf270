/* core/data/cache_dir.c — the cache directory both data caches build in (cache_dir.h). */
#include "cache_dir.h"

#include "../util/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static bora_status mkdirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return bora_error_set(BORA_ERR_IO, "%s: path too long", path);
    for (char *p = buf + 1;; p++) {
        if (*p && *p != '/')
            continue;
        char was = *p;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return bora_error_set(BORA_ERR_IO, "%s: %s", buf, strerror(errno));
        if (!(*p = was))
            return BORA_OK;
    }
}

bora_status bora_cache_dir_make(const char *dir, const char *kind, uint64_t key, char *out,
                                size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (dir && *dir)
        n = snprintf(out, cap, "%s", dir);
    else if (xdg && *xdg)
        n = snprintf(out, cap, "%s/bora/%s/%016llx", xdg, kind, (unsigned long long)key);
    else
        n = snprintf(out, cap, "%s/.cache/bora/%s/%016llx", home && *home ? home : "/tmp", kind,
                     (unsigned long long)key);
    if (n < 0 || (size_t)n >= cap)
        return bora_error_set(BORA_ERR_IO, "the cache directory for %s is too long a path",
                              dir && *dir ? dir : kind);
    return mkdirs(out);
}

bora_status bora_cache_dir_lock(const char *dir, int *fd)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/lock", dir);
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0)
        return bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB) == 0)
        return BORA_OK;
    int err = errno;
    if (err == EWOULDBLOCK) {
        bora_log(BORA_LOG_INFO, "data: waiting for another bora building the cache in %s", dir);
        while ((err = flock(*fd, LOCK_EX) != 0 ? errno : 0) == EINTR)
            ;
    }
    if (err) /* a file system without locks: shards are written whole and renamed anyway */
        bora_log(BORA_LOG_WARN,
                 "data: cannot lock %s (%s): building without the lock; another process building "
                 "the same cache at once would repeat the work",
                 path, strerror(err));
    return BORA_OK;
}

void bora_cache_dir_clean(const char *dir, int all)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int tmp = strstr(e->d_name, ".tmp.") != NULL;
        int ours = !strncmp(e->d_name, "shard-", 6) || !strcmp(e->d_name, "ledger.json") ||
                   !strcmp(e->d_name, "meta.json");
        if (tmp || (all && ours)) {
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

bora_status bora_cache_dir_write_json(const char *dir, const char *name, json_object *o)
{
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY);
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0 &&
             fsync(fileno(f)) == 0;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        bora_status st = bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno));
        unlink(tmp);
        return st;
    }
    return BORA_OK;
}

void bora_cache_builder_idle(void)
{
    struct sched_param sp = {0};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
}
