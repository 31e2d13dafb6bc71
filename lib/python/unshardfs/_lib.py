"""ctypes over libunshard.so (lib/loader/unshardfs.h): no compiler at install time.

The library is found, in this order, at $UNSHARDFS_LIB (the .so itself), under
$UNSHARDFS_BUILD (a meson build directory, relative to this checkout or absolute),
in this checkout's build/, or where the system keeps libraries (meson install).
"""
import contextlib
import ctypes
import ctypes.util
import numbers
import operator
import os
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))  # lib/python/unshardfs
_REL = os.path.join("lib", "loader", "libunshard.so")


class UnshardfsError(OSError):
    """A refusal of libunshard: one line "<path>: <what is wrong>" and its us_status."""

    STATUS = {-1: "NOMEM", -2: "IO", -3: "FORMAT", -4: "UNSUPPORTED", -5: "USAGE"}

    def __init__(self, status, msg):
        super().__init__(msg)
        self.status = self.STATUS.get(status, str(status))


class UsageError(UnshardfsError, ValueError):
    """A call refused before it reaches libunshard: a closed Loader, a number that
    does not fit its C type, a buffer smaller than the bytes asked for. Both an
    UnshardfsError (status "USAGE", as the library's own refusals of a bad index)
    and a ValueError (as Python's file objects say "I/O operation on closed file")."""

    def __init__(self, msg):
        super().__init__(-5, msg)


_U32, _U64 = 1 << 32, 1 << 64


def _uint(what, v, limit=_U64):
    """@v as a non-negative int below @limit: ctypes would wrap a negative or too
    large one silently (c_uint64(-1) is 2**64 - 1, c_uint64(2**64 + 5) is 5)."""
    v = operator.index(v)  # TypeError for a float, a str, None
    if not 0 <= v < limit:
        raise UsageError(f"unshardfs: {what} {v} is out of range [0, {limit})")
    return v


def _cstr(what, v):
    """@v (str, bytes or path-like) as bytes for a char *: an embedded NUL would
    cut it short without a word."""
    b = os.fsencode(v)
    if b"\0" in b:
        raise UsageError(f"unshardfs: {what} {v!r} contains a NUL byte")
    return b


def _address(what, buf, need):
    """(address, keep-alive) of @buf, room for @need bytes checked where it can be:
    a writable contiguous buffer (bytearray, memoryview, numpy array), a CPU torch
    tensor, or an int: a raw address, which the caller vouches for (need bytes)."""
    if hasattr(buf, "data_ptr") and hasattr(buf, "untyped_storage"):  # torch
        if buf.device.type != "cpu" or not buf.is_contiguous():
            raise UsageError(f"unshardfs: {what}: a tensor must be contiguous and on "
                             f"the CPU (this one: {buf.device}, contiguous="
                             f"{buf.is_contiguous()})")
        room = buf.numel() * buf.element_size()
        addr, keep = buf.data_ptr(), buf
    elif isinstance(buf, numbers.Integral):
        return _uint(f"{what} address", buf), None
    else:
        try:
            mv = memoryview(buf)
        except TypeError:
            raise TypeError(f"unshardfs: {what}: want an address (int), a writable "
                            f"buffer or a CPU tensor, not {type(buf).__name__}") from None
        if mv.readonly or not mv.c_contiguous:
            raise UsageError(f"unshardfs: {what}: the buffer must be writable and "
                             "contiguous")
        room = mv.nbytes
        keep = (ctypes.c_char * room).from_buffer(mv.cast("B")) if room else None
        addr = ctypes.addressof(keep) if room else 0
    if room < need:
        raise UsageError(f"unshardfs: {what}: the buffer has {room} bytes, "
                         f"{need} are to be read")
    return addr, keep


class _Err(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class Opts(ctypes.Structure):
    _fields_ = [("format", ctypes.c_char_p), ("no_unwrap", ctypes.c_bool),
                ("strip_prefix", ctypes.POINTER(ctypes.c_char_p)),
                ("nstrip", ctypes.c_size_t), ("dtype", ctypes.c_char_p),
                ("ties", ctypes.c_char_p), ("deepspeed_weights", ctypes.c_char_p),
                ("threads", ctypes.c_uint), ("cache_size", ctypes.c_uint64),
                ("recipe", ctypes.c_char_p), ("overlay", ctypes.c_char_p),
                ("hugepages", ctypes.c_bool),
                ("endpoint_url", ctypes.c_char_p), ("region", ctypes.c_char_p),
                ("profile", ctypes.c_char_p), ("addressing", ctypes.c_char_p),
                ("no_sign_request", ctypes.c_bool), ("cache_dir", ctypes.c_char_p),
                ("block_size", ctypes.c_uint64), ("cache_dir_size", ctypes.c_uint64),
                ("connections", ctypes.c_uint), ("retries", ctypes.c_uint),
                ("timeout_s", ctypes.c_uint)]

# A remote SOURCE's store (s3://, https://), as the daemon's options of the
# same names: keyword arguments of Loader and load(); the counts (block_size,
# cache_dir_size, connections, retries, timeout) also as options={...}.
REMOTE_KEYS = ("endpoint_url", "region", "profile", "addressing", "no_sign_request",
               "cache_dir")
REMOTE_COUNTS = ("block_size", "cache_dir_size", "connections", "retries", "timeout")


class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("ndim", ctypes.c_uint32), ("shape", ctypes.POINTER(ctypes.c_uint64)),
                ("nbytes", ctypes.c_uint64), ("tie", ctypes.c_size_t)]


class Req(ctypes.Structure):
    _fields_ = [("tensor", ctypes.c_size_t), ("off", ctypes.c_uint64),
                ("len", ctypes.c_uint64), ("buf", ctypes.c_void_p),
                ("chunk", ctypes.c_uint32)]


class Slice(ctypes.Structure):
    _fields_ = [("dim", ctypes.c_uint32), ("start", ctypes.c_uint64),
                ("stop", ctypes.c_uint64), ("outer0", ctypes.c_uint64),
                ("outer1", ctypes.c_uint64)]


def _candidates():
    if os.environ.get("UNSHARDFS_LIB"):
        yield os.environ["UNSHARDFS_LIB"]
        return
    if os.environ.get("UNSHARDFS_BUILD"):
        yield os.path.join(_REPO, os.environ["UNSHARDFS_BUILD"], _REL)
    yield os.path.join(_REPO, "build", _REL)
    found = ctypes.util.find_library("unshard")
    if found:
        yield found


def _open_lib():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        return _declare(ctypes.CDLL(path))  # CDLL: calls release the GIL
    raise ImportError("unshardfs: libunshard.so not found (tried %s): build it with "
                      "`meson compile -C build`, or set UNSHARDFS_LIB to its path"
                      % (", ".join(tried) or "nothing"))


U64P = ctypes.POINTER(ctypes.c_uint64)


def _declare(lib):
    P = ctypes.c_void_p
    sigs = {
        "us_loader_open": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(Opts),
                                          ctypes.POINTER(P), ctypes.POINTER(_Err)]),
        "us_loader_close": (None, [P]),
        "us_loader_source": (ctypes.c_char_p, [P]),
        "us_loader_options": (ctypes.c_char_p, [P]),
        "us_loader_mounted": (ctypes.c_bool, [P]),
        "us_loader_count": (ctypes.c_size_t, [P]),
        "us_loader_info": (ctypes.c_int, [P, ctypes.c_size_t, ctypes.POINTER(_Tensor),
                                          ctypes.POINTER(_Err)]),
        "us_loader_find": (ctypes.c_long, [P, ctypes.c_char_p]),
        "us_loader_chunk": (ctypes.c_uint32, [P, ctypes.c_size_t, ctypes.c_uint32,
                                              ctypes.POINTER(U64P), ctypes.POINTER(U64P)]),
        "us_loader_read": (ctypes.c_int, [P, ctypes.c_size_t, ctypes.c_uint64,
                                          ctypes.c_uint64, P, ctypes.c_uint64,
                                          ctypes.POINTER(_Err)]),
        "us_loader_read_many": (ctypes.c_int, [P, ctypes.POINTER(Req), ctypes.c_size_t,
                                               ctypes.POINTER(_Err)]),
        "us_loader_read_slice": (ctypes.c_int, [P, ctypes.c_size_t, ctypes.POINTER(Slice),
                                                P, ctypes.c_uint64, ctypes.POINTER(_Err)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


_lib = None


def lib():
    global _lib
    if _lib is None:
        _lib = _open_lib()
    return _lib


def _check(rc, err):
    if rc != 0:
        raise UnshardfsError(rc, err.msg.decode(errors="replace"))


class TensorInfo:
    __slots__ = ("index", "name", "dtype", "shape", "nbytes", "tie")

    def __init__(self, index, t):
        self.index = index
        self.name = t.name.decode()
        self.dtype = t.dtype.decode()
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        self.nbytes = t.nbytes
        self.tie = t.tie

    def __repr__(self):
        return f"TensorInfo({self.name!r}, {self.dtype}, {list(self.shape)})"


class Loader:
    """One opened checkpoint (us_loader_open); a context manager.

    After close() (or the with block) every method raises UsageError (a ValueError)
    rather than hand libunshard a freed loader; close() may be called again. A close
    while another thread is inside a call takes effect when that call returns."""

    _closed = True  # until __init__ has a handle: __del__ of a failed one is harmless

    def __init__(self, path, options=None, threads=0, hugepages=False, *,
                 endpoint_url=None, region=None, profile=None, addressing=None,
                 no_sign_request=False, cache_dir=None):
        o = dict(options or {})
        unknown = set(o) - {"format", "no_unwrap", "strip_prefix", "dtype", "ties",
                            "deepspeed_weights", "cache_size", "recipe",
                            "overlay"} - set(REMOTE_KEYS) - set(REMOTE_COUNTS)
        if unknown:
            raise TypeError(f"unshardfs: unknown options {sorted(unknown)}")
        strips = o.get("strip_prefix") or ()
        if isinstance(strips, (str, bytes)):
            strips = (strips,)
        strips = [_cstr("strip_prefix", p) for p in strips]
        self._strips = (ctypes.c_char_p * max(1, len(strips)))(*strips)

        def s(key):
            v = o.get(key)
            return None if v is None else _cstr(key, str(v))

        def kw(v, key):  # a keyword argument, else the options dict's
            return s(key) if v is None else _cstr(key, str(v))

        def n(key, limit=_U64):
            return _uint(key, o.get(key) or 0, limit)
        opts = Opts(format=s("format"), no_unwrap=bool(o.get("no_unwrap")),
                    strip_prefix=self._strips, nstrip=len(strips), dtype=s("dtype"),
                    ties=s("ties"), deepspeed_weights=s("deepspeed_weights"),
                    threads=_uint("threads", threads, _U32), cache_size=n("cache_size"),
                    recipe=s("recipe"), overlay=s("overlay"), hugepages=bool(hugepages),
                    endpoint_url=kw(endpoint_url, "endpoint_url"), region=kw(region, "region"),
                    profile=kw(profile, "profile"), addressing=kw(addressing, "addressing"),
                    no_sign_request=bool(no_sign_request or o.get("no_sign_request")),
                    cache_dir=kw(cache_dir, "cache_dir"),
                    block_size=n("block_size"), cache_dir_size=n("cache_dir_size"),
                    connections=n("connections", _U32), retries=n("retries", _U32),
                    timeout_s=n("timeout", _U32))
        self._lib = lib()
        self._lock = threading.Lock()
        self._busy = 0
        self._h = ctypes.c_void_p()
        err = _Err()
        rc = self._lib.us_loader_open(_cstr("path", path), ctypes.byref(opts),
                                      ctypes.byref(self._h), ctypes.byref(err))
        _check(rc, err)
        self._closed = False
        self.source = self._lib.us_loader_source(self._h).decode()
        self.options = self._lib.us_loader_options(self._h).decode()
        self.mounted = bool(self._lib.us_loader_mounted(self._h))
        self.tensors = [self._info(i) for i in range(self._lib.us_loader_count(self._h))]
        self.index = {t.name: t for t in self.tensors}

    @contextlib.contextmanager
    def _use(self):
        """The C handle, for one call: refused once closed, kept alive (a
        concurrent close() waits for the call to end) while in use."""
        with self._lock:
            if self._closed:
                raise UsageError("unshardfs: I/O operation on closed loader")
            self._busy += 1
        try:
            yield self._h
        finally:
            with self._lock:
                self._busy -= 1
                last = self._closed and not self._busy
            if last:
                self._free()

    def _tensor(self, i):
        """Index @i of a tensor, checked: ctypes would wrap a negative one."""
        i = operator.index(i)
        if not 0 <= i < len(self.tensors):
            raise UsageError(f"unshardfs: no tensor {i} ({len(self.tensors)} tensors)")
        return i

    def _info(self, i):
        t, err = _Tensor(), _Err()
        with self._use() as h:
            _check(self._lib.us_loader_info(h, i, ctypes.byref(t), ctypes.byref(err)), err)
        return TensorInfo(i, t)

    def chunks(self, i):
        """Tensor i's source chunks: a list of (corner, extent) boxes, tuples of ints."""
        i = self._tensor(i)
        offs, sizes = U64P(), U64P()
        nd = len(self.tensors[i].shape)
        boxes = []
        with self._use() as h:
            n = self._lib.us_loader_chunk(h, i, 0, ctypes.byref(offs), ctypes.byref(sizes))
            for k in range(n):
                self._lib.us_loader_chunk(h, i, k, ctypes.byref(offs), ctypes.byref(sizes))
                boxes.append((tuple(offs[d] for d in range(nd)),
                              tuple(sizes[d] for d in range(nd))))
        return boxes

    def read_slice(self, i, dim, start, stop, outer0, outer1, buf, cap=None):
        """Indices [start, stop) of dim for outer indices [outer0, outer1) of tensor i,
        into buf (us_loader_read_slice): a writable buffer or CPU tensor (cap: at most
        its size, default all of it), or an address with room for cap bytes."""
        i = self._tensor(i)
        if cap is None:
            if isinstance(buf, numbers.Integral):
                raise UsageError("unshardfs: read_slice: an address needs its cap")
            cap = _buffer_size(buf)
        cap = _uint("cap", cap)
        addr, keep = _address("read_slice", buf, cap)
        s = Slice(_uint("dim", dim, _U32), _uint("start", start), _uint("stop", stop),
                  _uint("outer0", outer0), _uint("outer1", outer1))
        err = _Err()
        with self._use() as h:
            _check(self._lib.us_loader_read_slice(h, i, ctypes.byref(s), addr, cap,
                                                  ctypes.byref(err)), err)
        del keep

    def read_many(self, reqs):
        """reqs: a list of (tensor index, byte offset, length, buffer[, chunk]): buffer
        a writable buffer or CPU tensor with room for length bytes, or an address;
        chunk k + 1 reads bytes of the tensor's chunk k (chunks()) in its own order."""
        reqs = list(reqs)
        keep, arr = [], (Req * max(1, len(reqs)))()
        for k, r in enumerate(reqs):
            if not isinstance(r, (tuple, list)) or len(r) not in (4, 5):
                raise TypeError(f"unshardfs: request {k}: want (tensor, offset, length, "
                                f"buffer[, chunk]), not {r!r}")
            length = _uint("length", r[2])
            addr, alive = _address(f"request {k}", r[3], length)
            keep.append(alive)
            arr[k] = Req(self._tensor(r[0]), _uint("offset", r[1]), length, addr,
                         _uint("chunk", r[4], _U32) if len(r) == 5 else 0)
        err = _Err()
        with self._use() as h:
            if reqs:
                _check(self._lib.us_loader_read_many(h, arr, len(reqs), ctypes.byref(err)),
                       err)
        del keep

    @property
    def closed(self):
        return self._closed

    def close(self):
        """Free the loader (now, or when the calls in flight return); again: nothing."""
        if "_lock" not in self.__dict__:
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
            now = not self._busy
        if now:
            self._free()

    def _free(self):
        h, self._h = self._h, ctypes.c_void_p()
        if h:
            self._lib.us_loader_close(h)

    def __enter__(self):
        if self._closed:
            raise UsageError("unshardfs: I/O operation on closed loader")
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _buffer_size(buf):
    """The bytes of a buffer or tensor, for a cap left out."""
    if hasattr(buf, "untyped_storage"):
        return buf.numel() * buf.element_size()
    try:
        return memoryview(buf).nbytes
    except TypeError:
        raise TypeError(f"unshardfs: want a writable buffer or a CPU tensor, not "
                        f"{type(buf).__name__}") from None
