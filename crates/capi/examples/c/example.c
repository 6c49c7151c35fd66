/*
 * libpontoon example and self-check: asynchronous and synchronous I/O on
 * one volume, every result checked, then the documented error cases.
 *
 *   example [--no-fork] [CLUSTER] VOLUME
 *
 * CLUSTER is a `pontoon up` directory or "etcd=URL[;name=NAME]"; without
 * it, $PONTOON_CLUSTER / $PONTOON_ETCD are used. VOLUME must be at least
 * 128 MiB; its first 80 MiB or so are overwritten. Prints one line per
 * failed check and a summary; exits 0 only if every check passed.
 * --no-fork skips the fork() check (valgrind's memcheck cannot follow a
 * child that maps a new io_uring after fork).
 *
 * Build: cc -Wall -Werror -I target/release/include example.c \
 *           -L target/release -lpontoon -o example
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pontoon.h"

#define KIB 1024ULL
#define MIB (1024ULL * 1024ULL)
#define BLOCK 4096ULL
#define NREQ 128      /* extents written and read back asynchronously */
#define QD 64         /* of them in flight at once */
#define MIN_SIZE (128 * MIB)

static int passed, failed;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (cond) {                                                \
			passed++;                                          \
		} else {                                                   \
			failed++;                                          \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, " [last error: %s]\n",             \
				pontoon_last_error());                     \
		}                                                          \
	} while (0)

/* A call that must fail with -err and leave a message. */
static void expect_err(const char *what, long long got, int err)
{
	const char *msg = pontoon_last_error();
	CHECK(got == -err, "%s: got %lld, want %d (%s)", what, got, -err,
	      strerror(err));
	CHECK(msg != NULL && msg[0] != '\0',
	      "%s: pontoon_last_error() is empty", what);
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The 8-byte word expected at volume offset `off` (a multiple of 8). */
static uint64_t pattern(uint64_t off, uint64_t seed)
{
	return (off * 0x9E3779B97F4A7C15ULL) ^ seed;
}

static void fill(void *buf, uint64_t len, uint64_t off, uint64_t seed)
{
	uint64_t *w = buf;
	for (uint64_t i = 0; i < len / 8; i++)
		w[i] = pattern(off + i * 8, seed);
}

/* The first offset in buf that does not hold the pattern, or UINT64_MAX. */
static uint64_t verify(const void *buf, uint64_t len, uint64_t off,
		       uint64_t seed)
{
	const uint64_t *w = buf;
	for (uint64_t i = 0; i < len / 8; i++)
		if (w[i] != pattern(off + i * 8, seed))
			return off + i * 8;
	return UINT64_MAX;
}

static int all_zero(const void *buf, uint64_t len)
{
	const uint8_t *b = buf;
	for (uint64_t i = 0; i < len; i++)
		if (b[i])
			return 0;
	return 1;
}

static void *xalloc(uint64_t len)
{
	void *p = NULL;
	if (posix_memalign(&p, BLOCK, len ? len : BLOCK) != 0) {
		fprintf(stderr, "out of memory\n");
		exit(2);
	}
	return p;
}

static const uint64_t SEED = 0x706f6e746f6f6eULL;

struct extent {
	uint64_t off, len;
	void *buf;
	int done;
};

static struct extent ext[NREQ];

/*
 * Issues op (0 write, 1 read) on every extent, QD at a time, reaping with
 * pontoon_poll; checks each completion's result. Returns the number of
 * completions seen.
 */
static int run_async(pontoon_ctx *ctx, pontoon_vol *vol, int read)
{
	struct pontoon_completion c[QD];
	int next = 0, inflight = 0, seen = 0;
	for (int i = 0; i < NREQ; i++)
		ext[i].done = 0;
	while (seen < NREQ) {
		while (inflight < QD && next < NREQ) {
			struct extent *e = &ext[next];
			int r = read ? pontoon_aio_read(vol, e->buf, e->len,
							e->off, next)
				     : pontoon_aio_write(vol, e->buf, e->len,
							 e->off, next);
			CHECK(r == 0, "aio %s %d: %d", read ? "read" : "write",
			      next, r);
			if (r != 0)
				return seen;
			next++;
			inflight++;
		}
		int n = pontoon_poll(ctx, c, 1, QD, 30 * 1000 * 1000);
		CHECK(n >= 1 && n <= QD, "pontoon_poll returned %d", n);
		if (n < 1)
			return seen;
		for (int k = 0; k < n; k++) {
			uint64_t i = c[k].user_data;
			if (i >= NREQ || ext[i].done) {
				CHECK(0, "completion with bad user_data %" PRIu64,
				      i);
				continue;
			}
			ext[i].done = 1;
			CHECK(c[k].result == (int64_t)ext[i].len,
			      "%s of extent %" PRIu64 ": result %" PRId64
			      ", want %" PRIu64,
			      read ? "read" : "write", i, c[k].result,
			      ext[i].len);
		}
		seen += n;
		inflight -= n;
	}
	return seen;
}

/* Reads [off, off+len) synchronously and says whether it is all zeros. */
static int reads_zero(pontoon_vol *vol, uint64_t off, uint64_t len)
{
	void *b = xalloc(len);
	memset(b, 0xa5, len);
	int64_t r = pontoon_read(vol, b, len, off);
	int z = r == (int64_t)len && all_zero(b, len);
	free(b);
	return z;
}

/* Reads [off, off+len) synchronously and checks the pattern. */
static int reads_pattern(pontoon_vol *vol, uint64_t off, uint64_t len,
			 uint64_t seed)
{
	void *b = xalloc(len);
	int64_t r = pontoon_read(vol, b, len, off);
	int ok = r == (int64_t)len && verify(b, len, off, seed) == UINT64_MAX;
	free(b);
	return ok;
}

/* Waits for `want` completions through the event fd only. */
static int wait_event_fd(pontoon_ctx *ctx, int fd, int want,
			 struct pontoon_completion *out)
{
	int got = 0;
	double deadline = now_ms() + 30000;
	while (got < want && now_ms() < deadline) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, 1000);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r <= 0)
			continue;
		int n = pontoon_poll(ctx, out + got, 0, want - got, 0);
		if (n < 0)
			return n;
		got += n;
	}
	return got;
}

struct other_thread {
	pontoon_ctx *ctx;
	pontoon_vol *vol;
	int poll_rc, read_rc;
	char msg[256];
};

static void *use_from_other_thread(void *arg)
{
	struct other_thread *t = arg;
	struct pontoon_completion c;
	char b[BLOCK];
	t->poll_rc = pontoon_poll(t->ctx, &c, 0, 1, 0);
	snprintf(t->msg, sizeof t->msg, "%s", pontoon_last_error());
	t->read_rc = (int)pontoon_read(t->vol, b, BLOCK, 0);
	return NULL;
}

/* A thread with a context of its own: random verified reads. */
struct reader {
	const char *cluster, *volume;
	int failures;
	char msg[256];
};

#define READER_IOS 256
#define READER_QD 16
#define READER_BASE (32 * MIB)
#define READER_SPAN (32 * MIB)

static void *reader_thread(void *arg)
{
	struct reader *t = arg;
	pontoon_ctx *ctx = NULL;
	pontoon_vol *vol = NULL;
	if (pontoon_connect(t->cluster, &ctx) != 0 ||
	    pontoon_open(ctx, t->volume, &vol) != 0) {
		t->failures++;
		snprintf(t->msg, sizeof t->msg, "%s", pontoon_last_error());
		if (ctx)
			pontoon_disconnect(ctx);
		return NULL;
	}
	char *bufs = xalloc(READER_QD * BLOCK);
	uint64_t offs[READER_QD], x = (uint64_t)(uintptr_t)t | 1;
	struct pontoon_completion c[READER_QD];
	/* Batches of READER_QD reads in flight, each batch verified. */
	for (int batch = 0; batch < READER_IOS / READER_QD; batch++) {
		for (int slot = 0; slot < READER_QD; slot++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			offs[slot] = READER_BASE + (x % (READER_SPAN / BLOCK)) * BLOCK;
			if (pontoon_aio_read(vol, bufs + slot * BLOCK, BLOCK,
					     offs[slot], slot) != 0) {
				t->failures++;
				snprintf(t->msg, sizeof t->msg, "aio read: %s",
					 pontoon_last_error());
				goto out;
			}
		}
		for (int want = READER_QD; want > 0;) {
			int n = pontoon_poll(ctx, c, 1, READER_QD, 10 * 1000 * 1000);
			if (n <= 0) {
				t->failures++;
				snprintf(t->msg, sizeof t->msg, "poll %d: %s", n,
					 pontoon_last_error());
				goto out;
			}
			for (int k = 0; k < n; k++) {
				uint64_t slot = c[k].user_data;
				if (slot >= READER_QD ||
				    c[k].result != (int64_t)BLOCK ||
				    verify(bufs + slot * BLOCK, BLOCK, offs[slot],
					   SEED) != UINT64_MAX) {
					t->failures++;
					snprintf(t->msg, sizeof t->msg,
						 "bad read: result %" PRId64,
						 c[k].result);
				}
			}
			want -= n;
		}
	}
out:
	free(bufs);
	pontoon_close(vol);
	pontoon_disconnect(ctx);
	return NULL;
}

/*
 * In a forked child: the parent's context is refused; a new one works.
 * Returns the child's exit status (0: all good).
 */
static int child_after_fork(const char *cluster, const char *volume,
			    pontoon_ctx *parent_ctx, uint64_t off, uint64_t len)
{
	struct pontoon_completion c;
	if (pontoon_poll(parent_ctx, &c, 0, 1, 0) != -EPERM)
		return 10;
	pontoon_ctx *ctx = NULL;
	pontoon_vol *vol = NULL;
	if (pontoon_connect(cluster, &ctx) != 0)
		return 11;
	if (pontoon_open(ctx, volume, &vol) != 0)
		return 12;
	void *b = xalloc(len);
	if (pontoon_aio_read(vol, b, len, off, 7) != 0)
		return 13;
	if (pontoon_poll(ctx, &c, 1, 1, -1) != 1 || c.user_data != 7 ||
	    c.result != (int64_t)len)
		return 14;
	if (verify(b, len, off, SEED) != UINT64_MAX)
		return 15;
	free(b);
	if (pontoon_close(vol) != 0)
		return 16;
	pontoon_disconnect(ctx);
	return 0;
}

int main(int argc, char **argv)
{
	const char *cluster = NULL, *volume = NULL;
	int do_fork = 1;
	if (argc > 1 && strcmp(argv[1], "--no-fork") == 0) {
		do_fork = 0;
		argv++;
		argc--;
	}
	if (argc == 3) {
		cluster = argv[1];
		volume = argv[2];
	} else if (argc == 2) {
		volume = argv[1];
	} else {
		fprintf(stderr, "usage: %s [--no-fork] [CLUSTER] VOLUME\n",
			argv[0]);
		return 2;
	}
	double t0 = now_ms();

	pontoon_ctx *ctx = NULL;
	int r = pontoon_connect(cluster, &ctx);
	if (r != 0) {
		fprintf(stderr, "pontoon_connect: %s (%s)\n", strerror(-r),
			pontoon_last_error());
		return 1;
	}
	pontoon_vol *vol = NULL;
	r = pontoon_open(ctx, volume, &vol);
	if (r != 0) {
		fprintf(stderr, "pontoon_open %s: %s (%s)\n", volume,
			strerror(-r), pontoon_last_error());
		pontoon_disconnect(ctx);
		return 1;
	}
	CHECK(pontoon_last_error()[0] == '\0',
	      "last error not empty after a success");
	struct pontoon_stat st;
	r = pontoon_stat(vol, &st);
	CHECK(r == 0 && st.block_size == 4096 && st.object_size > 0,
	      "stat: %d, block %u, object %u", r, st.block_size,
	      st.object_size);
	if (r != 0 || st.size < MIN_SIZE) {
		fprintf(stderr, "volume %s is %" PRIu64 " bytes; need %llu\n",
			volume, st.size, MIN_SIZE);
		return 1;
	}

	/* 1. Extents of 4 KiB to 1 MiB, back to back, crossing objects. */
	uint64_t off = 0, rng = 88172645463325252ULL;
	for (int i = 0; i < NREQ; i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		uint64_t blocks = 1 + rng % 256;
		ext[i].off = off;
		ext[i].len = blocks * BLOCK;
		ext[i].buf = xalloc(ext[i].len);
		fill(ext[i].buf, ext[i].len, off, SEED);
		off += ext[i].len;
	}
	const uint64_t written = off;
	double t = now_ms();
	CHECK(run_async(ctx, vol, 0) == NREQ, "async writes incomplete");
	double write_ms = now_ms() - t;

	/* 2. Read it all back asynchronously and compare. */
	for (int i = 0; i < NREQ; i++)
		memset(ext[i].buf, 0, ext[i].len);
	t = now_ms();
	CHECK(run_async(ctx, vol, 1) == NREQ, "async reads incomplete");
	double read_ms = now_ms() - t;
	for (int i = 0; i < NREQ; i++) {
		uint64_t bad = verify(ext[i].buf, ext[i].len, ext[i].off, SEED);
		CHECK(bad == UINT64_MAX,
		      "extent %d (%" PRIu64 "+%" PRIu64
		      ") differs at offset %" PRIu64,
		      i, ext[i].off, ext[i].len, bad);
	}

	/* 3. Flush, synchronous and asynchronous. */
	struct pontoon_completion c[8];
	CHECK(pontoon_flush(vol) == 0, "flush");
	CHECK(pontoon_aio_flush(vol, 1001) == 0, "aio flush");
	r = pontoon_poll(ctx, c, 1, 8, -1);
	CHECK(r == 1 && c[0].user_data == 1001 && c[0].result == 0,
	      "aio flush completion: n %d result %" PRId64, r, c[0].result);

	/* 4. Discard: the range reads as zeros, its neighbours keep data. */
	const uint64_t d_off = 3 * MIB + 8 * KIB, d_len = 1 * MIB + 64 * KIB;
	CHECK(pontoon_discard(vol, d_len, d_off) == 0, "discard");
	CHECK(reads_zero(vol, d_off, d_len), "discarded range not zero");
	CHECK(reads_pattern(vol, d_off - BLOCK, BLOCK, SEED) &&
		      reads_pattern(vol, d_off + d_len, BLOCK, SEED),
	      "data next to the discarded range changed");
	const uint64_t ad_off = 9 * MIB, ad_len = 64 * KIB;
	CHECK(pontoon_aio_discard(vol, ad_len, ad_off, 1002) == 0,
	      "aio discard");
	r = pontoon_poll(ctx, c, 1, 8, -1);
	CHECK(r == 1 && c[0].user_data == 1002 && c[0].result == 0,
	      "aio discard completion");
	CHECK(reads_zero(vol, ad_off, ad_len), "aio-discarded range not zero");

	/* 5. Write zeroes, likewise. */
	const uint64_t z_off = 6 * MIB - 16 * KIB, z_len = 2 * MIB + 32 * KIB;
	CHECK(pontoon_write_zeroes(vol, z_len, z_off) == 0, "write_zeroes");
	CHECK(reads_zero(vol, z_off, z_len), "zeroed range not zero");
	CHECK(reads_pattern(vol, z_off - BLOCK, BLOCK, SEED) &&
		      reads_pattern(vol, z_off + z_len, BLOCK, SEED),
	      "data next to the zeroed range changed");
	const uint64_t az_off = 12 * MIB, az_len = 12 * KIB;
	CHECK(pontoon_aio_write_zeroes(vol, az_len, az_off, 1003) == 0,
	      "aio write_zeroes");
	r = pontoon_poll(ctx, c, 1, 8, -1);
	CHECK(r == 1 && c[0].user_data == 1003 && c[0].result == 0,
	      "aio write_zeroes completion");
	CHECK(reads_zero(vol, az_off, az_len), "aio-zeroed range not zero");

	/* 6. Synchronous write and read, across an object boundary. */
	const uint64_t s_len = 256 * KIB, s_off = 16 * MIB - 128 * KIB;
	const uint64_t SEED2 = 0x5eed2;
	void *sb = xalloc(s_len);
	fill(sb, s_len, s_off, SEED2);
	CHECK(pontoon_write(vol, sb, s_len, s_off) == (int64_t)s_len,
	      "sync write");
	memset(sb, 0, s_len);
	CHECK(pontoon_read(vol, sb, s_len, s_off) == (int64_t)s_len &&
		      verify(sb, s_len, s_off, SEED2) == UINT64_MAX,
	      "sync read back");
	CHECK(pontoon_read(vol, sb, 0, 0) == 0 &&
		      pontoon_write(vol, sb, 0, st.size) == 0,
	      "zero-length read and write");
	free(sb);

	/* 7. The event fd: an asynchronous read seen through it alone. */
	int efd = pontoon_event_fd(ctx);
	CHECK(efd >= 0, "pontoon_event_fd: %d", efd);
	if (efd >= 0) {
		/* It may be readable spuriously now and then; once
		 * pontoon_poll found nothing to do, it is not. */
		struct pollfd p = { .fd = efd, .events = POLLIN };
		for (int i = 0; i < 3 && poll(&p, 1, 0) == 1; i++)
			pontoon_poll(ctx, c, 0, 8, 0);
		CHECK(poll(&p, 1, 0) == 0, "event fd readable with no work");
		void *eb = xalloc(64 * KIB);
		CHECK(pontoon_aio_read(vol, eb, 64 * KIB, 20 * MIB, 1004) == 0,
		      "aio read (event fd)");
		int n = wait_event_fd(ctx, efd, 1, c);
		CHECK(n == 1 && c[0].user_data == 1004 &&
			      c[0].result == (int64_t)(64 * KIB) &&
			      verify(eb, 64 * KIB, 20 * MIB, SEED) ==
				      UINT64_MAX,
		      "event fd completion: %d", n);
		for (int i = 0; i < 3 && poll(&p, 1, 0) == 1; i++)
			pontoon_poll(ctx, c, 0, 8, 0);
		CHECK(poll(&p, 1, 0) == 0, "event fd readable after draining");
		free(eb);
	}

	/* 8. Errors, each with its documented code and a message. */
	pontoon_vol *nope = NULL;
	expect_err("open unknown volume",
		   pontoon_open(ctx, "no-such-volume-4711", &nope), ENOENT);
	char small[BLOCK];
	expect_err("read past the end", pontoon_read(vol, small, BLOCK, st.size),
		   EINVAL);
	expect_err("aio write over the end",
		   pontoon_aio_write(vol, small, 2 * BLOCK, st.size - BLOCK, 1),
		   EINVAL);
	expect_err("discard past the end", pontoon_discard(vol, BLOCK, st.size),
		   EINVAL);
	expect_err("misaligned length", pontoon_read(vol, small, 100, 0),
		   EINVAL);
	expect_err("misaligned offset",
		   pontoon_aio_read(vol, small, BLOCK, 512, 1), EINVAL);
	expect_err("misaligned write_zeroes",
		   pontoon_write_zeroes(vol, BLOCK, 1), EINVAL);
	expect_err("NULL buffer", pontoon_read(vol, NULL, BLOCK, 0), EINVAL);
	expect_err("poll min > max", pontoon_poll(ctx, c, 2, 1, 0), EINVAL);
	pontoon_ctx *bad = NULL;
	expect_err("connect to a directory without cluster.toml",
		   pontoon_connect("/nonexistent-pontoon-dir", &bad), ENOENT);
	expect_err("connect with a bad string",
		   pontoon_connect("etcd=;name=x", &bad), EINVAL);

	/* The limit of requests outstanding. */
	CHECK(pontoon_set_max_in_flight(ctx, 2) == 0, "set max in flight");
	char lb[3][BLOCK];
	CHECK(pontoon_aio_read(vol, lb[0], BLOCK, 0, 1) == 0 &&
		      pontoon_aio_read(vol, lb[1], BLOCK, BLOCK, 2) == 0,
	      "two reads under a limit of 2");
	expect_err("a third read over the limit",
		   pontoon_aio_read(vol, lb[2], BLOCK, 2 * BLOCK, 3), EAGAIN);
	int got = 0;
	while (got < 2) {
		r = pontoon_poll(ctx, c + got, 1, 2 - got, -1);
		if (r <= 0)
			break;
		got += r;
	}
	CHECK(got == 2 && c[0].result == BLOCK && c[1].result == BLOCK,
	      "the two limited reads: %d", got);
	CHECK(pontoon_set_max_in_flight(ctx, 1024) == 0, "restore the limit");

	/* Another thread may not use the context. */
	struct other_thread ot = { .ctx = ctx, .vol = vol };
	pthread_t th;
	if (pthread_create(&th, NULL, use_from_other_thread, &ot) == 0) {
		pthread_join(th, NULL);
		CHECK(ot.poll_rc == -EPERM && ot.read_rc == -EPERM &&
			      ot.msg[0] != '\0',
		      "from another thread: poll %d read %d", ot.poll_rc,
		      ot.read_rc);
	}

	/* Four more threads, each with a context of its own, reading at
	 * once (they share the process's cluster-map watch). */
	struct reader rd[4];
	pthread_t rth[4];
	int started = 0;
	for (int i = 0; i < 4; i++) {
		rd[i] = (struct reader){ .cluster = cluster, .volume = volume };
		if (pthread_create(&rth[i], NULL, reader_thread, &rd[i]) == 0)
			started++;
		else
			break;
	}
	CHECK(started == 4, "started %d reader threads", started);
	for (int i = 0; i < started; i++) {
		pthread_join(rth[i], NULL);
		CHECK(rd[i].failures == 0, "reader thread %d: %d failures %s", i,
		      rd[i].failures, rd[i].msg);
	}

	/* Close waits for requests in flight; completions still arrive. */
	pontoon_vol *v2 = NULL;
	CHECK(pontoon_open(ctx, volume, &v2) == 0, "open a second handle");
	void *cb = xalloc(8 * 64 * KIB);
	for (int i = 0; i < 8; i++)
		CHECK(pontoon_aio_read(v2, (char *)cb + i * 64 * KIB, 64 * KIB,
				       i * 64 * KIB, 2000 + i) == 0,
		      "aio read before close");
	CHECK(pontoon_close(v2) == 0, "close with requests in flight");
	got = 0;
	for (int tries = 0; got < 8 && tries < 8; tries++) {
		r = pontoon_poll(ctx, c + got, 0, 8 - got, 0);
		if (r < 0)
			break;
		got += r;
	}
	CHECK(got == 8, "completions after close: %d of 8", got);
	for (int i = 0; i < got; i++)
		CHECK(c[i].result == (int64_t)(64 * KIB),
		      "read before close: %" PRId64, c[i].result);
	CHECK(verify(cb, 8 * 64 * KIB, 0, SEED) == UINT64_MAX,
	      "data read before close");
	free(cb);

	/* A closed volume. */
	expect_err("aio read on a closed volume",
		   pontoon_aio_read(v2, small, BLOCK, 0, 1), EBADF);
	expect_err("read on a closed volume", pontoon_read(v2, small, BLOCK, 0),
		   EBADF);
	expect_err("stat of a closed volume", pontoon_stat(v2, &st), EBADF);
	expect_err("closing twice", pontoon_close(v2), EBADF);

	/* 9. fork(): the child connects afresh; the parent's context is
	 * refused there. */
	if (do_fork) {
		fflush(NULL);
		pid_t pid = fork();
		if (pid == 0)
			_exit(child_after_fork(cluster, volume, ctx, 24 * MIB,
					       128 * KIB));
		int status = -1;
		CHECK(pid > 0 && waitpid(pid, &status, 0) == pid &&
			      WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "forked child: status %d", status);
	}

	CHECK(pontoon_close(vol) == 0, "close");
	pontoon_disconnect(ctx);
	for (int i = 0; i < NREQ; i++)
		free(ext[i].buf);

	double total = now_ms() - t0;
	printf("pontoon example: %d checks passed, %d failed "
	       "(%.1f MiB written in %.0f ms, read in %.0f ms; total %.0f ms)\n",
	       passed, failed, written / (double)MIB, write_ms, read_ms, total);
	return failed == 0 ? 0 : 1;
}
