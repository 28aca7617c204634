/*
 * edged_client: a minimal C client for edged's wire protocol v1 (docs/protocol.md).
 *
 * Sends one raw HxWx3 uint8 frame (BGR, as OpenCV captures it) to a model and prints the
 * reply header, then one line per output frame with its shape and, for float32 outputs,
 * the index of the largest value in the first row (a classifier's answer).
 *
 *   edged_client ENDPOINT MODEL [--image FILE.ppm] [--size HxW] [--timeout-ms N]
 *
 * The frame is a binary PPM (P6, 8-bit) given with --image, or a generated gradient of
 * --size (default 48x64). Exit status: 0 OK, 1 a non-OK reply, 2 bad usage or input,
 * 3 no reply in time.
 *
 * It uses a REQ socket: one request, one reply (the daemon echoes REQ's delimiter).
 * Reply headers are the daemon's compact JSON; this example finds the few fields it
 * prints by scanning, where a real client would use a JSON library.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

static int usage(void) {
    fprintf(stderr, "usage: edged_client ENDPOINT MODEL [--image FILE.ppm] [--size HxW] "
                    "[--timeout-ms N]\n");
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

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    const char *endpoint = argv[1], *model = argv[2], *image = NULL;
    int h = 48, w = 64, timeout_ms = 10000;
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

    char header[512];
    snprintf(header, sizeof header,
             "{\"v\":1,\"id\":\"c-1\",\"op\":\"infer\",\"model\":\"%s\","
             "\"inputs\":[{\"dtype\":\"uint8\",\"shape\":[%d,%d,3],\"encoding\":\"raw\"}]}",
             model, h, w);

    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_REQ);
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    zmq_setsockopt(sock, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    int rc = 3;
    if (zmq_connect(sock, endpoint) != 0) {
        fprintf(stderr, "edged_client: cannot connect to %s: %s\n", endpoint,
                zmq_strerror(zmq_errno()));
        rc = 2;
        goto done;
    }
    /* frame 0: the JSON header; frame 1: the frame's bytes. */
    if (zmq_send(sock, header, strlen(header), ZMQ_SNDMORE) < 0 ||
        zmq_send(sock, px, nbytes, 0) < 0) {
        fprintf(stderr, "edged_client: send failed: %s\n", zmq_strerror(zmq_errno()));
        goto done;
    }

    zmq_msg_t frames[17];
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            fprintf(stderr, "edged_client: no reply from %s within %d ms\n", endpoint,
                    timeout_ms);
            zmq_msg_close(&m);
            for (int k = 0; k < n; k++) zmq_msg_close(&frames[k]);
            goto done;
        }
        more = zmq_msg_more(&m);
        if (n < 17)
            frames[n++] = m;
        else
            zmq_msg_close(&m);
    }
    size_t hl = zmq_msg_size(&frames[0]);
    char *reply = malloc(hl + 1);
    memcpy(reply, zmq_msg_data(&frames[0]), hl);
    reply[hl] = '\0';
    printf("header: %s\n", reply);
    char status[64] = "";
    scan_string(reply, "\"status\":\"", status, sizeof status);
    printf("status: %s\n", status);
    print_outputs(reply, frames + 1, n - 1);
    rc = strcmp(status, "OK") == 0 ? 0 : 1;
    free(reply);
    for (int k = 0; k < n; k++) zmq_msg_close(&frames[k]);
done:
    free(px);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return rc;
}
