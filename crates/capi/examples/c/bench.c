/*
 * A closed-loop random-read (or -write) load through libpontoon, to
 * compare with `pontoon bench`: QD requests in flight on one context,
 * each completion replaced by a new request at a random block.
 *
 *   bench CLUSTER VOLUME QD SECONDS [BS] [write]
 *
 * Prints IOPS, latency (mean, p50, p99) in microseconds, and the process's
 * CPU time per I/O (as `pontoon bench` reports the client's).
 *
 * Build: cc -O2 -Wall -I target/release/include bench.c \
 *           -L target/release -lpontoon -o bench
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "pontoon.h"

#define MAX_QD 1024
#define BUCKETS 100000 /* 0.1 us each, up to 10 ms */

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static uint64_t below(uint64_t n)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint64_t)(((unsigned __int128)(rng * 0x2545F4914F6CDD1DULL) * n) >> 64);
}

static uint64_t hist[BUCKETS + 1];

static double cpu_us(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + u.ru_utime.tv_usec +
	       u.ru_stime.tv_usec;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s CLUSTER VOLUME QD SECONDS [BS] [write]\n", argv[0]);
		return 2;
	}
	int qd = atoi(argv[3]);
	double secs = atof(argv[4]);
	uint64_t bs = argc > 5 ? strtoull(argv[5], NULL, 0) : 4096;
	int write = argc > 6 && strcmp(argv[6], "write") == 0;
	if (qd < 1 || qd > MAX_QD || bs == 0 || bs % 4096) {
		fprintf(stderr, "bad QD or BS\n");
		return 2;
	}
	pontoon_ctx *ctx;
	pontoon_vol *vol;
	struct pontoon_stat st;
	if (pontoon_connect(argv[1], &ctx) || pontoon_open(ctx, argv[2], &vol) ||
	    pontoon_stat(vol, &st)) {
		fprintf(stderr, "%s\n", pontoon_last_error());
		return 1;
	}
	uint64_t blocks = st.size / bs;
	char *bufs;
	if (posix_memalign((void **)&bufs, 4096, (size_t)qd * bs))
		return 1;
	memset(bufs, 0x5a, (size_t)qd * bs);
	uint64_t started[MAX_QD];
	struct pontoon_completion c[MAX_QD];
	for (int i = 0; i < qd; i++) {
		started[i] = now_ns();
		int r = write ? pontoon_aio_write(vol, bufs + i * bs, bs, below(blocks) * bs, i)
			      : pontoon_aio_read(vol, bufs + i * bs, bs, below(blocks) * bs, i);
		if (r) {
			fprintf(stderr, "submit: %s\n", pontoon_last_error());
			return 1;
		}
	}
	double cpu0 = cpu_us();
	uint64_t t0 = now_ns(), end = t0 + (uint64_t)(secs * 1e9), ios = 0;
	double sum_us = 0;
	int inflight = qd;
	while (inflight > 0) {
		int n = pontoon_poll(ctx, c, 1, qd, -1);
		if (n < 0) {
			fprintf(stderr, "poll: %s\n", pontoon_last_error());
			return 1;
		}
		uint64_t now = now_ns();
		for (int k = 0; k < n; k++) {
			int i = (int)c[k].user_data;
			if (c[k].result != (int64_t)bs) {
				fprintf(stderr, "I/O failed: %" PRId64 " %s\n", c[k].result,
					pontoon_last_error());
				return 1;
			}
			uint64_t lat = now - started[i];
			sum_us += lat / 1e3;
			uint64_t b = lat / 100;
			hist[b > BUCKETS ? BUCKETS : b]++;
			ios++;
			inflight--;
			if (now < end) {
				started[i] = now;
				uint64_t off = below(blocks) * bs;
				int r = write ? pontoon_aio_write(vol, bufs + i * bs, bs, off, i)
					      : pontoon_aio_read(vol, bufs + i * bs, bs, off, i);
				if (r) {
					fprintf(stderr, "submit: %s\n", pontoon_last_error());
					return 1;
				}
				inflight++;
			}
		}
	}
	double elapsed = (now_ns() - t0) / 1e9;
	double cpu = cpu_us() - cpu0;
	double p50 = 0, p99 = 0;
	uint64_t acc = 0;
	for (int b = 0; b <= BUCKETS; b++) {
		acc += hist[b];
		if (!p50 && acc * 2 >= ios)
			p50 = b / 10.0;
		if (!p99 && acc * 100 >= ios * 99) {
			p99 = b / 10.0;
			break;
		}
	}
	printf("%s qd=%d bs=%" PRIu64 ": %.0f IOPS, mean %.1f us, p50 %.1f us, p99 %.1f us, CPU %.1f us/IO (%" PRIu64
	       " ios in %.2f s)\n",
	       write ? "randwrite" : "randread", qd, bs, ios / elapsed, sum_us / ios, p50, p99, cpu / ios,
	       ios, elapsed);
	pontoon_close(vol);
	pontoon_disconnect(ctx);
	free(bufs);
	return 0;
}
