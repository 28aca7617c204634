/*
 * edged_client: a minimal C client for edged's wire protocol v1 (docs/protocol.md).
 *
 * Sends one raw HxWx3 uint8 frame (BGR, as OpenCV captures it) to a model and prints the
 * reply header, then one line per output frame with its shape and, for float32 outputs,
 * the index of the largest value in the first row (a classifier's answer).
 *
 *   edged_client ENDPOINT MODEL [--image FILE.ppm] [--size HxW] [--timeout-ms N] [--shm]
 *
 * --shm (same host only): the frame travels through shared memory instead of the
 * socket: the client asks for a ring (op "shm"), maps the segment the daemon names
 * (shm_open + mmap), writes the frame into slot 0 and sends a header whose input says
 * "encoding":"shm" with segment, offset and length; it gives the ring back at the end.
 *
 * The frame is a binary PPM (P6, 8-bit) given with --image, or a generated gradient of
 * --size (default 48x64). Exit status: 0 OK, 1 a non-OK reply, 2 bad usage or input,
 * 3 no reply in time.
 *
 * It uses a REQ socket: one request, one reply (the daemon echoes REQ's delimiter).
 * Reply headers are the daemon's compact JSON; this example finds the few fields it
 * prints by scanning, where a real client would use a JSON library.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zmq.h>

static int usage(void) {
    fprintf(stderr, "usage: edged_client ENDPOINT MODEL [--image FILE.ppm] [--size HxW] "
                    "[--timeout-ms N] [--shm]\n");
    return 2;
}

/* A binary PPM (P6, maxval 255) -> BGR bytes. Returns NULL with a message on stderr. */
static uint8_t *read_ppm(const char *path, int *h, int *w) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "edged_client: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    int maxval = 0;
    if (fscanf(f, "P6 %d %d %d", w, h, &maxval) != 3 || maxval != 255 || *w <= 0 ||
        *h <= 0 || *w > 16384 || *h > 16384 || fgetc(f) == EOF) {
        fprintf(stderr, "edged_client: %s: not an 8-bit binary PPM (P6)\n", path);
        fclose(f);
        return NULL;
    }
    size_t n = (size_t)*h * (size_t)*w * 3;
    uint8_t *px = malloc(n);
    if (!px || fread(px, 1, n, f) != n) {
        fprintf(stderr, "edged_client: %s: truncated pixel data\n", path);
        free(px);
        fclose(f);
        return NULL;
    }
    fclose(f);
    for (size_t i = 0; i < n; i += 3) { /* PPM is RGB; the daemon's default is BGR */
        uint8_t r = px[i];
        px[i] = px[i + 2];
        px[i + 2] = r;
    }
    return px;
}

static uint8_t *make_frame(int h, int w) {
    uint8_t *px = malloc((size_t)h * (size_t)w * 3);
    if (!px) return NULL;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(255 * x / (w > 1 ? w - 1 : 1));
            p[1] = (uint8_t)(255 * y / (h > 1 ? h - 1 : 1));
            p[2] = 128;
        }
    return px;
}

/* Copies the JSON string value that follows `key` (e.g. "\"name\":\"") into out. */
static const char *scan_string(const char *from, const char *key, char *out, size_t cap) {
    const char *p = strstr(from, key);
    if (!p) return NULL;
    p += strlen(key);
    size_t i = 0;
    while (*p && *p != '"' && i + 1 < cap) out[i++] = *p++;
    out[i] = '\0';
    return p;
}

static void print_outputs(const char *header, zmq_msg_t *frames, int nframes) {
    const char *p = strstr(header, "\"outputs\":[");
    for (int k = 0; p && k < nframes; k++) {
        char name[128], dtype[32], shape[128];
        if (!(p = scan_string(p, "\"name\":\"", name, sizeof name))) return;
        if (!(p = scan_string(p, "\"dtype\":\"", dtype, sizeof dtype))) return;
        const char *s = strstr(p, "\"shape\":[");
        if (!s) return;
        s += strlen("\"shape\":");
        size_t i = 0;
        while (*s && i + 2 < sizeof shape) {
            shape[i++] = *s;
            if (*s++ == ']') break;
        }
        shape[i] = '\0';
        p = s;
        size_t bytes = zmq_msg_size(&frames[k]);
        printf("output %d: name=%s dtype=%s shape=%s bytes=%zu", k, name, dtype, shape, bytes);
        if (strcmp(dtype, "float32") == 0 && bytes >= 4) {
            /* The first row: everything after the first dimension (little-endian host). */
            long rows = strtol(shape + 1, NULL, 10);
            size_t n = bytes / 4 / (size_t)(rows > 0 ? rows : 1);
            const uint8_t *data = zmq_msg_data(&frames[k]);
            size_t best = 0;
            float bestv = 0;
            for (size_t j = 0; j < n; j++) {
                float v;
                memcpy(&v, data + 4 * j, 4);
                if (j == 0 || v > bestv) {
                    best = j;
                    bestv = v;
                }
            }
            printf(" argmax=%zu value=%g", best, bestv);
        }
        printf("\n");
    }
}

/* The model name goes into JSON: allow only characters that need no escaping. */
static int safe_name(const char *s) {
    if (!*s || strlen(s) > 200) return 0;
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20) return 0;
    return 1;
}

/* Receives one reply into frames (at most cap); returns the count, or -1 on timeout. */
static int recv_reply(void *sock, zmq_msg_t *frames, int cap) {
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            for (int k = 0; k < n; k++) zmq_msg_close(&frames[k]);
            return -1;
        }
        more = zmq_msg_more(&m);
        if (n < cap)
            frames[n++] = m;
        else
            zmq_msg_close(&m);
    }
    return n;
}

/* A NUL-terminated copy of a frame (a reply header). */
static char *frame_text(zmq_msg_t *m) {
    size_t len = zmq_msg_size(m);
    char *s = malloc(len + 1);
    if (!s) return NULL;
    memcpy(s, zmq_msg_data(m), len);
    s[len] = '\0';
    return s;
}

/* One JSON-only request, its reply header back (malloc'd), or NULL on timeout. */
static char *call_json(void *sock, const char *json) {
    if (zmq_send(sock, json, strlen(json), 0) < 0) return NULL;
    zmq_msg_t frames[4];
    int n = recv_reply(sock, frames, 4);
    if (n <= 0) return NULL;
    char *text = frame_text(&frames[0]);
    for (int k = 0; k < n; k++) zmq_msg_close(&frames[k]);
    return text;
}

/* The shared-memory ring of one slot: the daemon creates it, we map it. */
struct ring {
    char name[96];
    uint8_t *base;
    size_t size;
};

/* Ask for a one-slot ring holding nbytes; 0 on success, with a message on failure. */
static int ring_open(void *sock, size_t nbytes, struct ring *r) {
    char req[256];
    snprintf(req, sizeof req,
             "{\"v\":1,\"id\":\"c-ring\",\"op\":\"shm\",\"slots\":1,\"slot_bytes\":%zu,"
             "\"pid\":%ld}", nbytes, (long)getpid());
    char *reply = call_json(sock, req);
    if (!reply) {
        fprintf(stderr, "edged_client: no reply to the shm request\n");
        return -1;
    }
    char status[64] = "", slot[32] = "";
    scan_string(reply, "\"status\":\"", status, sizeof status);
    if (strcmp(status, "OK") != 0 || !scan_string(reply, "\"segment\":\"", r->name,
                                                  sizeof r->name)) {
        fprintf(stderr, "edged_client: no shared-memory ring: %s\n", reply);
        free(reply);
        return -1;
    }
    const char *p = strstr(reply, "\"slot_bytes\":");
    if (p) snprintf(slot, sizeof slot, "%s", p + strlen("\"slot_bytes\":"));
    r->size = (size_t)strtoull(slot, NULL, 10);
    free(reply);
    char path[112];
    snprintf(path, sizeof path, "/%s", r->name);
    int fd = shm_open(path, O_RDWR, 0);
    if (fd < 0 || r->size < nbytes) {
        fprintf(stderr, "edged_client: cannot open segment %s: %s\n", r->name,
                fd < 0 ? strerror(errno) : "smaller than the frame");
        if (fd >= 0) close(fd);
        return -1;
    }
    r->base = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (r->base == MAP_FAILED) {
        fprintf(stderr, "edged_client: mmap %s: %s\n", r->name, strerror(errno));
        return -1;
    }
    return 0;
}

/* Give the ring back now rather than when the daemon reaps it. */
static void ring_close(void *sock, struct ring *r) {
    munmap(r->base, r->size);
    char req[192];
    snprintf(req, sizeof req, "{\"v\":1,\"id\":\"c-release\",\"op\":\"shm\",\"release\":\"%s\"}",
             r->name);
    free(call_json(sock, req));
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    const char *endpoint = argv[1], *model = argv[2], *image = NULL;
    int h = 48, w = 64, timeout_ms = 10000, use_shm = 0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--image") == 0 && i + 1 < argc) {
            image = argv[++i];
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%dx%d", &h, &w) != 2 || h <= 0 || w <= 0 || h > 16384 ||
                w > 16384) {
                fprintf(stderr, "edged_client: --size wants HxW, e.g. 48x64\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc) {
            timeout_ms = atoi(argv[++i]);
            if (timeout_ms <= 0) {
                fprintf(stderr, "edged_client: --timeout-ms wants a positive number\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--shm") == 0) {
            use_shm = 1;
        } else {
            return usage();
        }
    }
    if (!safe_name(model)) {
        fprintf(stderr, "edged_client: model name must not contain quotes, backslashes or "
                        "control characters\n");
        return 2;
    }
    uint8_t *px = image ? read_ppm(image, &h, &w) : make_frame(h, w);
    if (!px) return 2;
    size_t nbytes = (size_t)h * (size_t)w * 3;

    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_REQ);
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    zmq_setsockopt(sock, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    int rc = 3;
    struct ring ring = {.base = NULL};
    if (zmq_connect(sock, endpoint) != 0) {
        fprintf(stderr, "edged_client: cannot connect to %s: %s\n", endpoint,
                zmq_strerror(zmq_errno()));
        rc = 2;
        goto done;
    }
    char header[512];
    if (use_shm) {
        if (ring_open(sock, nbytes, &ring) != 0) {
            rc = 1;
            goto done;
        }
        memcpy(ring.base, px, nbytes); /* slot 0: the daemon reads it when the header comes */
        snprintf(header, sizeof header,
                 "{\"v\":1,\"id\":\"c-1\",\"op\":\"infer\",\"model\":\"%s\","
                 "\"inputs\":[{\"dtype\":\"uint8\",\"shape\":[%d,%d,3],\"encoding\":\"shm\","
                 "\"segment\":\"%s\",\"offset\":0,\"length\":%zu}]}",
                 model, h, w, ring.name, nbytes);
    } else {
        snprintf(header, sizeof header,
                 "{\"v\":1,\"id\":\"c-1\",\"op\":\"infer\",\"model\":\"%s\","
                 "\"inputs\":[{\"dtype\":\"uint8\",\"shape\":[%d,%d,3],\"encoding\":\"raw\"}]}",
                 model, h, w);
    }
    /* frame 0: the JSON header; frame 1: the frame's bytes (none with --shm). */
    if (zmq_send(sock, header, strlen(header), use_shm ? 0 : ZMQ_SNDMORE) < 0 ||
        (!use_shm && zmq_send(sock, px, nbytes, 0) < 0)) {
        fprintf(stderr, "edged_client: send failed: %s\n", zmq_strerror(zmq_errno()));
        goto done;
    }

    zmq_msg_t frames[17];
    int n = recv_reply(sock, frames, 17);
    if (n <= 0) {
        fprintf(stderr, "edged_client: no reply from %s within %d ms\n", endpoint,
                timeout_ms);
        goto done;
    }
    char *reply = frame_text(&frames[0]);
    if (!reply) goto done;
    printf("header: %s\n", reply);
    char status[64] = "";
    scan_string(reply, "\"status\":\"", status, sizeof status);
    printf("status: %s\n", status);
    print_outputs(reply, frames + 1, n - 1);
    rc = strcmp(status, "OK") == 0 ? 0 : 1;
    free(reply);
    for (int k = 0; k < n; k++) zmq_msg_close(&frames[k]);
    if (ring.base) {
        ring_close(sock, &ring);
        ring.base = NULL;
    }
done:
    if (ring.base) munmap(ring.base, ring.size);
    free(px);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return rc;
}
