"""ctypes over libunshard.so (lib/loader/unshardfs.h): no compiler at install time.

The library is found, in this order, at $UNSHARDFS_LIB (the .so itself), under
$UNSHARDFS_BUILD (a meson build directory, relative to this checkout or absolute),
in this checkout's build/, or where the system keeps libraries (meson install).
"""
import ctypes
import ctypes.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))  # lib/python/unshardfs
_REL = os.path.join("lib", "loader", "libunshard.so")


class UnshardfsError(OSError):
    """A refusal of libunshard: one line "<path>: <what is wrong>" and its us_status."""

    STATUS = {-1: "NOMEM", -2: "IO", -3: "FORMAT", -4: "UNSUPPORTED", -5: "USAGE"}

    def __init__(self, status, msg):
        super().__init__(msg)
        self.status = self.STATUS.get(status, str(status))


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
    """One opened checkpoint (us_loader_open); a context manager."""

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
        if isinstance(strips, str):
            strips = (strips,)
        self._strips = (ctypes.c_char_p * max(1, len(strips)))(
            *[s.encode() for s in strips])

        def s(key):
            v = o.get(key)
            return None if v is None else str(v).encode()

        def kw(v, key):  # a keyword argument, else the options dict's
            return s(key) if v is None else os.fsencode(str(v))
        opts = Opts(format=s("format"), no_unwrap=bool(o.get("no_unwrap")),
                    strip_prefix=self._strips, nstrip=len(strips), dtype=s("dtype"),
                    ties=s("ties"), deepspeed_weights=s("deepspeed_weights"),
                    threads=threads, cache_size=int(o.get("cache_size") or 0),
                    recipe=s("recipe"), overlay=s("overlay"), hugepages=bool(hugepages),
                    endpoint_url=kw(endpoint_url, "endpoint_url"), region=kw(region, "region"),
                    profile=kw(profile, "profile"), addressing=kw(addressing, "addressing"),
                    no_sign_request=bool(no_sign_request or o.get("no_sign_request")),
                    cache_dir=kw(cache_dir, "cache_dir"),
                    block_size=int(o.get("block_size") or 0),
                    cache_dir_size=int(o.get("cache_dir_size") or 0),
                    connections=int(o.get("connections") or 0),
                    retries=int(o.get("retries") or 0), timeout_s=int(o.get("timeout") or 0))
        self._lib = lib()
        self._h = ctypes.c_void_p()
        err = _Err()
        rc = self._lib.us_loader_open(os.fsencode(path), ctypes.byref(opts),
                                      ctypes.byref(self._h), ctypes.byref(err))
        _check(rc, err)
        self.source = self._lib.us_loader_source(self._h).decode()
        self.options = self._lib.us_loader_options(self._h).decode()
        self.mounted = bool(self._lib.us_loader_mounted(self._h))
        self.tensors = [self._info(i) for i in range(self._lib.us_loader_count(self._h))]
        self.index = {t.name: t for t in self.tensors}

    def _info(self, i):
        t, err = _Tensor(), _Err()
        _check(self._lib.us_loader_info(self._h, i, ctypes.byref(t), ctypes.byref(err)), err)
        return TensorInfo(i, t)

    def chunks(self, i):
        """Tensor i's source chunks: a list of (corner, extent) boxes, tuples of ints."""
        offs, sizes = U64P(), U64P()
        n = self._lib.us_loader_chunk(self._h, i, 0, ctypes.byref(offs), ctypes.byref(sizes))
        nd = len(self.tensors[i].shape)
        boxes = []
        for k in range(n):
            self._lib.us_loader_chunk(self._h, i, k, ctypes.byref(offs), ctypes.byref(sizes))
            boxes.append((tuple(offs[d] for d in range(nd)), tuple(sizes[d] for d in range(nd))))
        return boxes

    def read_slice(self, i, dim, start, stop, outer0, outer1, buf, cap):
        """Indices [start, stop) of dim for outer indices [outer0, outer1) of tensor i,
        into cap bytes at address buf (us_loader_read_slice)."""
        s, err = Slice(dim, start, stop, outer0, outer1), _Err()
        _check(self._lib.us_loader_read_slice(self._h, i, ctypes.byref(s), buf, cap,
                                              ctypes.byref(err)), err)

    def read_many(self, reqs):
        """reqs: a list of (tensor index, byte offset, length, address[, chunk]):
        chunk k + 1 reads bytes of the tensor's chunk k (chunks()) in its own order."""
        if not reqs:
            return
        arr = (Req * len(reqs))(*[Req(*r) for r in reqs])
        err = _Err()
        _check(self._lib.us_loader_read_many(self._h, arr, len(reqs), ctypes.byref(err)), err)

    def close(self):
        if self._h:
            self._lib.us_loader_close(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
