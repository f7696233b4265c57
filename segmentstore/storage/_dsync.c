/* segmentstore.storage._dsync: a log write lane that never waits for the GIL.
 *
 * Contract. ``Lane(efd)`` starts one pthread. ``submit(fd, parts, pos)`` (on the event loop,
 * GIL held) takes a Py_buffer of every part and hands the job to that thread through a mutex
 * and a condition variable. The thread, with no Python state at all, writes the parts at file
 * offset ``pos`` with pwritev(RWF_DSYNC) (at most IOV_MAX iovecs per call, resuming after
 * short writes, retrying EINTR), records (bytes written, errno, CLOCK_MONOTONIC ns at submit,
 * start and end) in C memory, then adds 1 to the eventfd ``efd`` (the loop polls it with its
 * sockets). ``take()`` (GIL held) returns that record once and releases the job's buffers;
 * None while the job runs or when there is none. One job at a time: ``submit`` while a job
 * is submitted and not yet taken raises RuntimeError. ``close()`` waits for a job in flight,
 * stops the thread; its record stays for ``take()``; buffers not taken are released at
 * dealloc. No Python API is called without the GIL; the only allocations are the iovec and
 * Py_buffer arrays, grown (never shrunk) when a job has more parts than any before it.
 * ``max_write`` (tests only) caps the bytes of one pwritev call to force short writes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

#ifndef RWF_DSYNC
#define RWF_DSYNC 0x00000002
#endif

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int thread_started;
    int sync_ready;     /* mutex and condition made */
    int efd;
    int stop;           /* under mu */
    int job;            /* under mu: 1 submitted, not started or running */
    int done;           /* under mu: 1 result ready for take() */
    int fd;
    int64_t pos;
    Py_ssize_t max_write;
    /* the job's parts: buffers held from submit() to take() (or dealloc) */
    Py_buffer *bufs;
    struct iovec *iov;
    Py_ssize_t nparts;  /* buffers held */
    Py_ssize_t cap;
    /* the result, written by the thread before done = 1 */
    int64_t written;
    int err;
    int64_t submit_ns, start_ns, end_ns;
} Lane;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The write itself (no GIL, no Python): every iovec at pos, durable when it returns 0. */
static void run_job(Lane *self) {
    struct iovec *iov = self->iov;
    Py_ssize_t n = self->nparts, i = 0;
    int64_t pos = self->pos, total = 0;
    int err = 0;
    while (i < n && iov[i].iov_len == 0)
        i++;
    while (i < n) {
        int cnt = (int)((n - i) < IOV_MAX ? (n - i) : IOV_MAX);
        struct iovec saved = {NULL, 0};
        int cut = -1;
        if (self->max_write > 0) { /* tests: pretend the kernel wrote less */
            size_t sum = 0;
            for (int k = 0; k < cnt; k++) {
                if (sum + iov[i + k].iov_len >= (size_t)self->max_write) {
                    cut = k;
                    saved = iov[i + k];
                    iov[i + k].iov_len = (size_t)self->max_write - sum;
                    cnt = k + 1;
                    break;
                }
                sum += iov[i + k].iov_len;
            }
        }
        ssize_t w = pwritev2(self->fd, iov + i, cnt, (off_t)(pos + total), RWF_DSYNC);
        if (cut >= 0)
            iov[i + cut] = saved;
        if (w < 0) {
            if (errno == EINTR)
                continue;
            err = errno;
            break;
        }
        if (w == 0) { /* no progress: give up rather than spin */
            err = EIO;
            break;
        }
        total += w;
        size_t left = (size_t)w;
        while (left > 0) {
            if (left >= iov[i].iov_len) {
                left -= iov[i].iov_len;
                iov[i].iov_len = 0;
                i++;
            } else {
                iov[i].iov_base = (char *)iov[i].iov_base + left;
                iov[i].iov_len -= left;
                left = 0;
            }
        }
        while (i < n && iov[i].iov_len == 0)
            i++;
    }
    self->written = total;
    self->err = err;
}

static void *lane_main(void *arg) {
    Lane *self = (Lane *)arg;
    const uint64_t one = 1;
    pthread_mutex_lock(&self->mu);
    for (;;) {
        while (!self->job && !self->stop)
            pthread_cond_wait(&self->cv, &self->mu);
        if (!self->job) /* stop, nothing in hand */
            break;
        pthread_mutex_unlock(&self->mu);
        self->start_ns = now_ns();
        run_job(self);
        self->end_ns = now_ns();
        pthread_mutex_lock(&self->mu);
        self->job = 0;
        self->done = 1;
        pthread_mutex_unlock(&self->mu);
        /* After done = 1, so the loop, woken, always finds the result. EINTR: retry;
         * anything else (fd closed at shutdown): nobody is waiting. */
        while (write(self->efd, &one, sizeof one) < 0 && errno == EINTR) {
        }
        pthread_mutex_lock(&self->mu);
    }
    pthread_mutex_unlock(&self->mu);
    return NULL;
}

static void release_bufs(Lane *self) {
    for (Py_ssize_t i = 0; i < self->nparts; i++)
        PyBuffer_Release(&self->bufs[i]);
    self->nparts = 0;
}

static int Lane_init(Lane *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"efd", "max_write", NULL};
    int efd;
    Py_ssize_t max_write = 0;
    if (self->thread_started) {
        PyErr_SetString(PyExc_RuntimeError, "Lane already started");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|n", names, &efd, &max_write))
        return -1;
    self->efd = efd;
    self->max_write = max_write;
    if (!self->sync_ready) {
        if (pthread_mutex_init(&self->mu, NULL) != 0)
            goto no_sync;
        if (pthread_cond_init(&self->cv, NULL) != 0) {
            pthread_mutex_destroy(&self->mu);
            goto no_sync;
        }
        self->sync_ready = 1;
    }
    int rc = pthread_create(&self->thread, NULL, lane_main, self);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->thread_started = 1;
    return 0;
no_sync:
    PyErr_SetString(PyExc_OSError, "cannot make the lane's mutex");
    return -1;
}

static PyObject *Lane_submit(Lane *self, PyObject *args) {
    int fd;
    PyObject *parts;
    long long pos;
    if (!PyArg_ParseTuple(args, "iOL", &fd, &parts, &pos))
        return NULL;
    if (!self->thread_started || self->stop) {
        PyErr_SetString(PyExc_RuntimeError, "lane is closed");
        return NULL;
    }
    if (self->nparts || self->done || self->job) {
        PyErr_SetString(PyExc_RuntimeError, "lane busy: take() the last job first");
        return NULL;
    }
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "negative file offset");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(parts, "parts must be a sequence of buffers");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > self->cap) {
        Py_buffer *b = PyMem_Realloc(self->bufs, (size_t)n * sizeof(Py_buffer));
        if (b == NULL)
            goto nomem;
        self->bufs = b;
        struct iovec *v = PyMem_Realloc(self->iov, (size_t)n * sizeof(struct iovec));
        if (v == NULL)
            goto nomem;
        self->iov = v;
        self->cap = n;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(items[i], &self->bufs[i], PyBUF_SIMPLE) < 0) {
            release_bufs(self);
            Py_DECREF(seq);
            return NULL;
        }
        self->nparts = i + 1;
        self->iov[i].iov_base = self->bufs[i].buf;
        self->iov[i].iov_len = (size_t)self->bufs[i].len;
    }
    Py_DECREF(seq);
    self->fd = fd;
    self->pos = pos;
    self->written = 0;
    self->err = 0;
    self->submit_ns = now_ns();
    pthread_mutex_lock(&self->mu);
    self->job = 1;
    pthread_cond_signal(&self->cv);
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
nomem:
    Py_DECREF(seq);
    return PyErr_NoMemory();
}

static PyObject *Lane_take(Lane *self, PyObject *Py_UNUSED(ignored)) {
    if (!self->sync_ready)
        Py_RETURN_NONE;
    pthread_mutex_lock(&self->mu);
    int done = self->done;
    self->done = 0;
    pthread_mutex_unlock(&self->mu);
    if (!done)
        Py_RETURN_NONE;
    release_bufs(self);
    return Py_BuildValue("(LiLLL)", (long long)self->written, self->err,
                         (long long)self->submit_ns, (long long)self->start_ns,
                         (long long)self->end_ns);
}

static void stop_thread(Lane *self) {
    if (!self->thread_started)
        return;
    pthread_mutex_lock(&self->mu);
    self->stop = 1;
    pthread_cond_signal(&self->cv);
    pthread_mutex_unlock(&self->mu);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL); /* finishes a job in flight first */
    Py_END_ALLOW_THREADS
    self->thread_started = 0;
}

static PyObject *Lane_close(Lane *self, PyObject *Py_UNUSED(ignored)) {
    stop_thread(self);
    Py_RETURN_NONE;
}

static PyObject *Lane_get_busy(Lane *self, void *Py_UNUSED(closure)) {
    if (!self->sync_ready)
        Py_RETURN_FALSE;
    pthread_mutex_lock(&self->mu);
    int busy = self->nparts > 0 || self->job || self->done;
    pthread_mutex_unlock(&self->mu);
    return PyBool_FromLong(busy);
}

static PyObject *Lane_get_closed(Lane *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(!self->thread_started);
}

static void Lane_dealloc(Lane *self) {
    stop_thread(self);
    release_bufs(self);
    PyMem_Free(self->bufs);
    PyMem_Free(self->iov);
    if (self->sync_ready) {
        pthread_cond_destroy(&self->cv);
        pthread_mutex_destroy(&self->mu);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Lane_methods[] = {
    {"submit", (PyCFunction)Lane_submit, METH_VARARGS,
     "submit(fd, parts, pos): write parts at pos with pwritev(RWF_DSYNC) on the lane's thread"},
    {"take", (PyCFunction)Lane_take, METH_NOARGS,
     "take() -> (written, errno, submit_ns, start_ns, end_ns) of the finished job, or None"},
    {"close", (PyCFunction)Lane_close, METH_NOARGS,
     "close(): wait for a job in flight, then stop the thread (its result stays for take())"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Lane_getset[] = {
    {"busy", (getter)Lane_get_busy, NULL, "a job submitted and not yet taken", NULL},
    {"closed", (getter)Lane_get_closed, NULL, "the thread is stopped", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "segmentstore.storage._dsync.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_dealloc = (destructor)Lane_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Lane(efd, max_write=0): one pthread writing log batches with pwritev(RWF_DSYNC)",
    .tp_methods = Lane_methods,
    .tp_getset = Lane_getset,
    .tp_init = (initproc)Lane_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef dsync_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "segmentstore.storage._dsync",
    .m_doc = "The log's native write lane (pwritev(RWF_DSYNC) on a thread without the GIL).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__dsync(void) {
    if (PyType_Ready(&LaneType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&dsync_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&LaneType);
    if (PyModule_AddObject(m, "Lane", (PyObject *)&LaneType) < 0) {
        Py_DECREF(&LaneType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "IOV_MAX", IOV_MAX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
