/*
 * fio external ioengine for Pontoon volumes, over libpontoon's C API.
 *
 *   fio --ioengine=external:target/release/libpontoon_fio.so \
 *       --filename=VOLUME [--pontoon_cluster=DIR] \
 *       --name=x --rw=randread --bs=4k --iodepth=32 ...
 *
 * The cluster is the engine option pontoon_cluster (a directory `pontoon up`
 * made, or "etcd=URL[,URL][;name=NAME]"); without it libpontoon reads
 * $PONTOON_CLUSTER / $PONTOON_ETCD. Each file of the job (--filename=A:B
 * gives two) is a volume of that name.
 *
 * Built by scripts/build-fio-engine.sh against the source of the fio that
 * loads it (fio's structures have no stable ABI between versions).
 *
 * Threading: a pontoon_ctx belongs to the thread that connected it and all
 * calls on it (and on the volumes opened from it) must come from that
 * thread. fio runs a job's engine hooks on the job's own thread (or
 * process), except setup(), which by default (create_serialize=1) runs in
 * fio's main thread before the jobs start. So:
 *   - setup() connects a short-lived context of its own, opens each volume
 *     only to learn its size (fio needs it to size the job), and
 *     disconnects; when init() already ran on this thread
 *     (create_serialize=0), setup() uses that context instead;
 *   - init() connects the job's context on the job's thread;
 *   - open_file()/close_file() open and close the volume on it;
 *   - queue() submits (pontoon_aio_*) with user_data = the io_u, and
 *     getevents() runs pontoon_poll(), which drives the context's I/O in
 *     this thread until enough completions are in; event() hands them out.
 * Like fio's rbd engine, jobs run as threads (thread=1 is forced), so the
 * library's process-wide state set up by setup()'s connection is never
 * carried across a fork.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fio.h"
#include "optgroup.h"

#include <pontoon.h>

struct pontoon_options {
	void *pad;		/* fio: an option's off1 must not be 0 */
	char *cluster;
	unsigned int busy_poll;
};

static struct fio_option options[] = {
	{
		.name		= "pontoon_cluster",
		.lname		= "Pontoon cluster",
		.type		= FIO_OPT_STR_STORE,
		.help		= "Cluster directory made by `pontoon up`, or etcd=URL[,URL][;name=NAME] "
				  "(default: $PONTOON_CLUSTER, else $PONTOON_ETCD)",
		.off1		= offsetof(struct pontoon_options, cluster),
		.category	= FIO_OPT_C_ENGINE,
		.group		= FIO_OPT_G_INVALID,
	},
	{
		.name		= "pontoon_busy_poll",
		.lname		= "Pontoon busy poll",
		.type		= FIO_OPT_BOOL,
		.help		= "Poll for completions without sleeping (burns a core per job)",
		.off1		= offsetof(struct pontoon_options, busy_poll),
		.def		= "0",
		.category	= FIO_OPT_C_ENGINE,
		.group		= FIO_OPT_G_INVALID,
	},
	{
		.name		= NULL,
	},
};

struct pontoon_data {
	pontoon_ctx *ctx;		/* the job's context (init) */
	pthread_t owner;		/* the thread that connected ctx */
	struct pontoon_completion *cqes; /* filled by getevents */
	struct io_u **events;		/* cqes' io_us, for event() */
	unsigned int nr_cqes;		/* room in cqes/events */
	pontoon_vol **vols;		/* open volumes, by fileno (for cleanup) */
	unsigned int nr_vols;
	unsigned int errors_logged;	/* failed completions described so far */
};

/*
 * The engine shares fio's structures, which change between versions: the
 * build script passes the version of the headers (PONTOON_FIO_BUILT).
 */
static int check_fio_version(struct thread_data *td)
{
#ifndef PONTOON_FIO_BUILT
	return 0;
#else
	if (strcmp(fio_version_string, PONTOON_FIO_BUILT) == 0)
		return 0;
	log_err("fio: pontoon: this engine was built for %s headers but runs in %s; "
		"rebuild it with scripts/build-fio-engine.sh\n", PONTOON_FIO_BUILT, fio_version_string);
	td_verror(td, EINVAL, "pontoon engine version");
	return 1;
#endif
}

static const char *cluster_of(struct thread_data *td)
{
	struct pontoon_options *o = td->eo;

	return o && o->cluster && o->cluster[0] ? o->cluster : NULL;
}

/* Where the cluster was looked for, for messages. */
static const char *cluster_desc(struct thread_data *td)
{
	const char *c = cluster_of(td);

	if (c)
		return c;
	if (getenv("PONTOON_CLUSTER"))
		return getenv("PONTOON_CLUSTER");
	if (getenv("PONTOON_ETCD"))
		return getenv("PONTOON_ETCD");
	return "(none given)";
}

static const char *last_error(int r)
{
	const char *e = pontoon_last_error();

	return e && e[0] ? e : strerror(r < 0 ? -r : r);
}

static struct pontoon_data *get_data(struct thread_data *td)
{
	struct pontoon_data *pd = td->io_ops_data;

	if (!pd) {
		pd = calloc(1, sizeof(*pd));
		if (!pd) {
			td_verror(td, ENOMEM, "calloc");
			return NULL;
		}
		td->io_ops_data = pd;
	}
	return pd;
}

static int connect_ctx(struct thread_data *td, pontoon_ctx **ctx)
{
	int r = pontoon_connect(cluster_of(td), ctx);

	if (r < 0) {
		const char *e = last_error(r);

		log_err("fio: pontoon: cannot connect to cluster %s: %s\n", cluster_desc(td), e);
		td_vmsg(td, -r, e, "pontoon_connect");
		*ctx = NULL;
		return 1;
	}
	return 0;
}

static int open_vol(struct thread_data *td, pontoon_ctx *ctx, struct fio_file *f,
		    pontoon_vol **vol, struct pontoon_stat *st)
{
	int r = pontoon_open(ctx, f->file_name, vol);

	if (r < 0) {
		const char *e = last_error(r);

		log_err("fio: pontoon: cannot open volume '%s' (cluster %s): %s%s\n",
			f->file_name, cluster_desc(td), e,
			td->o.filename ? "" : " (name the volume with --filename=VOLUME)");
		td_vmsg(td, -r, e, "pontoon_open");
		*vol = NULL;
		return 1;
	}
	r = pontoon_stat(*vol, st);
	if (r < 0) {
		const char *e = last_error(r);

		log_err("fio: pontoon: cannot stat volume '%s': %s\n", f->file_name, e);
		td_vmsg(td, -r, e, "pontoon_stat");
		pontoon_close(*vol);
		*vol = NULL;
		return 1;
	}
	return 0;
}

/* Block sizes and alignment the volume cannot take fail here, by name, not as a stream of EINVAL. */
static int check_block_size(struct thread_data *td, struct fio_file *f, const struct pontoon_stat *st)
{
	unsigned long long bs = st->block_size ? st->block_size : 1;
	int d;

	for (d = DDIR_READ; d < DDIR_RWDIR_CNT; d++) {
		if (td->o.min_bs[d] % bs || td->o.max_bs[d] % bs ||
		    (td->o.ba[d] && td->o.ba[d] % bs)) {
			log_err("fio: pontoon: volume '%s' takes I/O in multiples of %llu bytes; "
				"bs=%llu-%llu (blockalign %llu) does not fit\n",
				f->file_name, bs, (unsigned long long)td->o.min_bs[d],
				(unsigned long long)td->o.max_bs[d], (unsigned long long)td->o.ba[d]);
			td_verror(td, EINVAL, "pontoon block size");
			return 1;
		}
	}
	return 0;
}

/*
 * Runs in fio's main thread (before the job starts) unless
 * create_serialize=0: learns each volume's size.
 */
static int fio_pontoon_setup(struct thread_data *td)
{
	struct pontoon_data *pd = get_data(td);
	pontoon_ctx *ctx = NULL;
	struct fio_file *f;
	unsigned int i;
	int own = 0, err = 0;

	if (!pd || check_fio_version(td))
		return 1;
	/* see the top of this file (same as fio's rbd engine) */
	td->o.use_thread = 1;

	/* no --filename: one file, the job's name (as fio's rbd/nbd engines do) */
	if (!td->files_index) {
		add_file(td, td->o.filename ? : td->o.name, 0, 0);
		td->o.nr_files = td->o.nr_files ? : 1;
		td->o.open_files++;
	}

	if (pd->ctx && pthread_equal(pd->owner, pthread_self())) {
		ctx = pd->ctx;
	} else {
		if (connect_ctx(td, &ctx))
			return 1;
		own = 1;
	}
	for_each_file(td, f, i) {
		pontoon_vol *vol;
		struct pontoon_stat st;

		if (open_vol(td, ctx, f, &vol, &st)) {
			err = 1;
			break;
		}
		pontoon_close(vol);
		if (check_block_size(td, f, &st)) {
			err = 1;
			break;
		}
		dprint(FD_FILE, "pontoon: volume %s: %" PRIu64 " bytes, block %u, object %u\n",
		       f->file_name, st.size, st.block_size, st.object_size);
		f->real_file_size = st.size;
		fio_file_set_size_known(f);
	}
	if (own)
		pontoon_disconnect(ctx);
	return err;
}

/* Runs on the job's thread: connects the job's context. */
static int fio_pontoon_init(struct thread_data *td)
{
	struct pontoon_data *pd = get_data(td);
	unsigned int depth;

	if (!pd || check_fio_version(td))
		return 1;
	depth = td->o.iodepth ? td->o.iodepth : 1;
	if (pd->nr_cqes < depth) {
		free(pd->cqes);
		free(pd->events);
		pd->cqes = calloc(depth, sizeof(*pd->cqes));
		pd->events = calloc(depth, sizeof(*pd->events));
		if (!pd->cqes || !pd->events) {
			td_verror(td, ENOMEM, "calloc");
			return 1;
		}
		pd->nr_cqes = depth;
	}
	if (pd->ctx)
		return 0;
	if (connect_ctx(td, &pd->ctx))
		return 1;
	pd->owner = pthread_self();
#ifdef PONTOON_DEFAULT_MAX_IN_FLIGHT
	/* room for every io_u fio may have in flight (iodepth), never -EAGAIN */
	if (depth > PONTOON_DEFAULT_MAX_IN_FLIGHT) {
		int r = pontoon_set_max_in_flight(pd->ctx, depth);

		if (r < 0) {
			log_err("fio: pontoon: iodepth=%u: %s\n", depth, last_error(r));
			td_vmsg(td, -r, last_error(r), "pontoon_set_max_in_flight");
			return 1;
		}
	}
#endif
	return 0;
}

static int remember_vol(struct pontoon_data *pd, unsigned int fileno, pontoon_vol *vol)
{
	if (fileno >= pd->nr_vols) {
		unsigned int n = fileno + 8;
		pontoon_vol **v = realloc(pd->vols, n * sizeof(*v));

		if (!v)
			return 1;
		memset(v + pd->nr_vols, 0, (n - pd->nr_vols) * sizeof(*v));
		pd->vols = v;
		pd->nr_vols = n;
	}
	pd->vols[fileno] = vol;
	return 0;
}

static int fio_pontoon_open_file(struct thread_data *td, struct fio_file *f)
{
	struct pontoon_data *pd = td->io_ops_data;
	struct pontoon_stat st;
	pontoon_vol *vol;

	if (!pd || !pd->ctx) {
		log_err("fio: pontoon: open of '%s' before the engine connected\n", f->file_name);
		td_verror(td, EINVAL, "pontoon open_file");
		return 1;
	}
	if (open_vol(td, pd->ctx, f, &vol, &st))
		return 1;
	if (remember_vol(pd, f->fileno, vol)) {
		pontoon_close(vol);
		td_verror(td, ENOMEM, "realloc");
		return 1;
	}
	FILE_SET_ENG_DATA(f, vol);
	f->real_file_size = st.size;
	fio_file_set_size_known(f);
	return 0;
}

static int fio_pontoon_close_file(struct thread_data *td, struct fio_file *f)
{
	struct pontoon_data *pd = td->io_ops_data;
	pontoon_vol *vol = FILE_ENG_DATA(f);
	int r = 0;

	if (vol) {
		FILE_SET_ENG_DATA(f, NULL);
		if (pd && f->fileno < pd->nr_vols && pd->vols[f->fileno] == vol)
			pd->vols[f->fileno] = NULL;
		r = pontoon_close(vol);
		if (r < 0) {
			log_err("fio: pontoon: close of volume '%s': %s\n", f->file_name, last_error(r));
			return -r;
		}
	}
	return 0;
}

/* Not a local file: never unlink anything of that name. */
static int fio_pontoon_unlink_file(struct thread_data *td, struct fio_file *f)
{
	return 0;
}

static enum fio_q_status fio_pontoon_queue(struct thread_data *td, struct io_u *io_u)
{
	pontoon_vol *vol = FILE_ENG_DATA(io_u->file);
	uint64_t ud = (uint64_t)(uintptr_t)io_u;
	int r;

	fio_ro_check(td, io_u);

	switch (io_u->ddir) {
	case DDIR_READ:
		r = pontoon_aio_read(vol, io_u->xfer_buf, io_u->xfer_buflen, io_u->offset, ud);
		break;
	case DDIR_WRITE:
		r = pontoon_aio_write(vol, io_u->xfer_buf, io_u->xfer_buflen, io_u->offset, ud);
		break;
	case DDIR_TRIM:
		r = pontoon_aio_discard(vol, io_u->xfer_buflen, io_u->offset, ud);
		break;
	case DDIR_SYNC:
	case DDIR_DATASYNC:
	case DDIR_SYNC_FILE_RANGE:
		r = pontoon_aio_flush(vol, ud);
		break;
	default:
		r = -EINVAL;
		break;
	}
	if (r < 0) {
		io_u->error = -r;
		log_err("fio: pontoon: submit %s of %llu bytes at %llu to '%s': %s\n",
			io_ddir_name(io_u->ddir), io_u->xfer_buflen, io_u->offset,
			io_u->file->file_name, last_error(r));
		return FIO_Q_COMPLETED;
	}
	return FIO_Q_QUEUED;
}

static int fio_pontoon_getevents(struct thread_data *td, unsigned int min,
				 unsigned int max, const struct timespec *t)
{
	struct pontoon_data *pd = td->io_ops_data;
	struct pontoon_options *o = td->eo;
	int64_t timeout_us = -1;
	int i, n;

	if (max > pd->nr_cqes)
		max = pd->nr_cqes;
	if (min > max)
		min = max;
	if (t)
		timeout_us = (int64_t)t->tv_sec * 1000000 + t->tv_nsec / 1000;
	if (min == 0)
		timeout_us = 0;

	if (o && o->busy_poll && timeout_us != 0) {
		/* spin on non-blocking polls until min are in */
		int got = 0;

		while (1) {
			n = pontoon_poll(pd->ctx, pd->cqes + got, 0, max - got, 0);
			if (n < 0 && n != -EINTR)
				break;
			if (n > 0)
				got += n;
			if ((unsigned int)got >= min)
				break;
		}
		if (n >= 0 || got)
			n = got;
	} else {
		do {
			n = pontoon_poll(pd->ctx, pd->cqes, min, max, timeout_us);
		} while (n == -EINTR && !t);
	}
	if (n < 0) {
		log_err("fio: pontoon: poll: %s\n", last_error(n));
		return n;
	}

	for (i = 0; i < n; i++) {
		struct io_u *io_u = (struct io_u *)(uintptr_t)pd->cqes[i].user_data;
		int64_t res = pd->cqes[i].result;

		if (res < 0) {
			io_u->error = (unsigned int)-res;
			/* fio reports the errno; the library knows why (first few only) */
			if (pd->errors_logged < 8) {
				pd->errors_logged++;
				log_err("fio: pontoon: %s of %llu bytes at %llu on '%s' failed: %s\n",
					io_ddir_name(io_u->ddir), io_u->xfer_buflen, io_u->offset,
					io_u->file->file_name, last_error((int)res));
			}
		} else {
			io_u->error = 0;
			/* reads and writes return their length; trims and flushes 0 */
			if ((io_u->ddir == DDIR_READ || io_u->ddir == DDIR_WRITE) &&
			    (unsigned long long)res < io_u->xfer_buflen)
				io_u->resid = io_u->xfer_buflen - res;
		}
		pd->events[i] = io_u;
	}
	return n;
}

static struct io_u *fio_pontoon_event(struct thread_data *td, int event)
{
	struct pontoon_data *pd = td->io_ops_data;

	return pd->events[event];
}

/* fill_device=1 asks again: the open volume's size, or setup()'s. */
static int fio_pontoon_get_file_size(struct thread_data *td, struct fio_file *f)
{
	pontoon_vol *vol = FILE_ENG_DATA(f);
	struct pontoon_stat st;
	int r;

	if (!vol)
		return 0;
	r = pontoon_stat(vol, &st);
	if (r < 0) {
		td_vmsg(td, -r, last_error(r), "pontoon_stat");
		return 1;
	}
	f->real_file_size = st.size;
	fio_file_set_size_known(f);
	return 0;
}

static void fio_pontoon_cleanup(struct thread_data *td)
{
	struct pontoon_data *pd = td->io_ops_data;
	unsigned int i;

	if (!pd)
		return;
	if (pd->ctx) {
		/* volumes fio did not close (errors): close them before their context */
		for (i = 0; i < pd->nr_vols; i++)
			if (pd->vols[i])
				pontoon_close(pd->vols[i]);
		pontoon_disconnect(pd->ctx);
	}
	free(pd->vols);
	free(pd->cqes);
	free(pd->events);
	free(pd);
	td->io_ops_data = NULL;
}

struct ioengine_ops ioengine = {
	.name			= "pontoon",
	.version		= FIO_IOOPS_VERSION,
	.flags			= FIO_DISKLESSIO | FIO_NOEXTEND | FIO_NODISKUTIL,
	.setup			= fio_pontoon_setup,
	.init			= fio_pontoon_init,
	.queue			= fio_pontoon_queue,
	.getevents		= fio_pontoon_getevents,
	.event			= fio_pontoon_event,
	.cleanup		= fio_pontoon_cleanup,
	.open_file		= fio_pontoon_open_file,
	.close_file		= fio_pontoon_close_file,
	.unlink_file		= fio_pontoon_unlink_file,
	.get_file_size		= fio_pontoon_get_file_size,
	.options		= options,
	.option_struct_size	= sizeof(struct pontoon_options),
};
