"""unshardfs: a sharded checkpoint's consolidated state dict, straight into memory.

    import unshardfs
    sd = unshardfs.load(PATH, device="cuda:0", dtype=None, names=None, shard=None)

PATH is a SOURCE (what `unshardfs SOURCE MNT` would mount) or the root of such a
mount, which is resolved to its SOURCE and its options. The state dict equals,
name for name and byte for byte, what the mount serves; tied names are one tensor
object. See docs/loader.md. torch is imported on first use, so `import unshardfs`
needs neither torch nor CUDA.
"""
import contextlib
import math

from ._lib import Loader, TensorInfo, UnshardfsError, UsageError  # noqa: F401

__all__ = ["load", "load_into", "init_empty", "Loader", "UnshardfsError",
           "UsageError"]

# Staging for devices other than the CPU: a ring of (pinned) host buffers.
SLOT_BYTES = 64 << 20
NSLOTS = 4
_ALIGN = 64


def _torch_dtype(name):
    import torch
    table = {
        "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
        "I32": torch.int32, "I64": torch.int64, "F16": torch.float16,
        "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
        "C64": torch.complex64,
    }
    optional = {"U16": "uint16", "U32": "uint32", "U64": "uint64",
                "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
                "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
                "F8_E5M2FNUZ": "float8_e5m2fnuz"}
    if name in table:
        return table[name]
    if name in optional and hasattr(torch, optional[name]):
        return getattr(torch, optional[name])
    raise UnshardfsError(-4, f"dtype {name}: this torch has no such dtype")


def _shard_dim(shard):
    """(rank, world, dim) of a shard= value: (rank, world) or (rank, world, dim)."""
    ok = isinstance(shard, (tuple, list)) and len(shard) in (2, 3) and \
        all(isinstance(x, int) for x in shard)
    rank, world, dim = (tuple(shard) + (0,))[:3] if ok else (0, 0, 0)
    if not ok or not 0 <= rank < world or dim < 0:
        raise ValueError(f"unshardfs: shard={shard!r}: want (rank, world) or "
                         "(rank, world, dim), 0 <= rank < world, dim >= 0")
    return rank, world, dim


def _span(info, shard):
    """(dim, i0, i1): the indices [i0, i1) of dim that rank `shard[0]` of `shard[1]`
    holds along dim `shard[2]` (default 0), as torch.chunk splits (chunks of
    ceil(n / world), the last ones shorter or empty).  Dim 0 also stands for the whole
    tensor: no shard, or a tensor without that dim (a 0-dim one; a 1-D norm weight
    for dim 1, replicated in tensor parallelism), is rows [0, n) of dim 0."""
    if shard is None:
        return 0, 0, info.shape[0] if info.shape else 1
    rank, world, dim = _shard_dim(shard)
    if dim >= len(info.shape):
        return 0, 0, info.shape[0] if info.shape else 1
    n = info.shape[dim]
    size = math.ceil(n / world) if n else 0
    i0 = min(n, rank * size)
    return dim, i0, min(n, i0 + size)


class _Item:
    """One tensor to read: the canonical of a tie group and the names it goes under,
    .len bytes in all.  Along dim 0 (or whole) it is rows [r0, r1): the tensor's
    bytes [off, off + len).  Along another dim, .slice is (dim, i0, i1) and .off is
    None: each of the .outer indices of the dims before is one run of .run bytes,
    .stride apart in the tensor, .inner bytes per index of dim."""

    def __init__(self, info, names, shard):
        self.info = info
        self.names = names
        dim, i0, i1 = _span(info, shard)
        self.slice = None
        if dim:
            self.slice = (dim, i0, i1)
            self.outer = math.prod(info.shape[:dim])
            n = self.outer * info.shape[dim]
            self.inner = info.nbytes // n if n else 0
            self.run, self.stride = (i1 - i0) * self.inner, info.shape[dim] * self.inner
            self.off, self.len = None, self.outer * self.run
            self.shape = info.shape[:dim] + (i1 - i0,) + info.shape[dim + 1:]
            return
        n = info.shape[0] if info.shape else 1
        row = info.nbytes // n if n else 0
        self.r0, self.r1 = i0, i1
        self.off, self.len = i0 * row, (i1 - i0) * row
        self.shape = ((i1 - i0),) + info.shape[1:] if info.shape else ()


def _plan(ld, names, shard):
    if names is None:
        wanted = [t.name for t in ld.tensors]
    else:
        wanted = list(dict.fromkeys(names))
        missing = [n for n in wanted if n not in ld.index]
        if missing:
            raise KeyError(f"unshardfs: {ld.source}: no tensor named {missing[0]!r}"
                           + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    groups = {}
    for name in wanted:
        groups.setdefault(ld.index[name].tie, []).append(name)
    return [_Item(ld.tensors[c], ns, shard) for c, ns in sorted(groups.items())]


def _read_direct(ld, plan):
    """Host memory: every tensor allocated, then one batch over the loader's threads
    (and one for each tensor sliced along another dim than the first)."""
    import torch
    outs, reqs = [], []
    for it in plan:
        t = torch.empty(it.shape, dtype=_torch_dtype(it.info.dtype))
        outs.append(t)
        if it.len and not it.slice:
            reqs.append((it.info.index, it.off, it.len, t.data_ptr()))
    ld.read_many(reqs)
    for it, t in zip(plan, outs):
        if it.len and it.slice:
            ld.read_slice(it.info.index, *it.slice, 0, it.outer, t.data_ptr(), it.len)
    return outs


class _Piece:
    """@n bytes of plan item @k on their way through a ring slot: how they are read
    (@req, a read_many request without its address: (tensor, off, len[, chunk]); or
    @slice, read_slice's (tensor, dim, start, stop, outer0, outer1)), and where they
    go: byte @dst of the tensor, in order; or, with @box (slices), a chunk's rows of
    @shape into that box.  Only bytes in order read by one request may be split."""

    __slots__ = ("k", "n", "req", "slice", "dst", "box", "shape")

    def __init__(self, k, n, req=None, slice=None, dst=0, box=None, shape=None):
        self.k, self.n, self.req, self.slice = k, n, req, slice
        self.dst, self.box, self.shape = dst, box, shape

    @property
    def splittable(self):
        return self.req is not None and self.box is None

    def split(self, m):
        """The first @m bytes, and the rest."""
        assert self.splittable and 0 < m < self.n
        i, off = self.req[:2]
        return (_Piece(self.k, m, req=(i, off, m), dst=self.dst),
                _Piece(self.k, self.n - m, req=(i, off + m, self.n - m), dst=self.dst + m))


def _tensor_pieces(k, it, slot_bytes):
    """@it's bytes in order, in pieces of at most a slot.  A slice along another dim
    than the first goes a slot's worth of outer indices at a time (read_slice), or,
    when one run exceeds a slot, run by run (each contiguous in the tensor)."""
    if not it.len:
        return
    i = it.info.index
    if it.slice and it.run > slot_bytes:
        for o in range(it.outer):
            src = o * it.stride + it.slice[1] * it.inner
            yield _Piece(k, it.run, req=(i, src, it.run), dst=o * it.run)
    elif it.slice:
        per = slot_bytes // it.run
        for a in range(0, it.outer, per):
            b = min(it.outer, a + per)
            yield _Piece(k, (b - a) * it.run, slice=(i,) + it.slice + (a, b),
                         dst=a * it.run)
    else:
        for pos in range(0, it.len, slot_bytes):
            n = min(slot_bytes, it.len - pos)
            yield _Piece(k, n, req=(i, it.off + pos, n), dst=pos)


def _box_pieces(ld, k, it, slot_bytes):
    """@it assembled on the device: each source chunk read whole (its rows that
    @it wants), in pieces of whole rows, each placed into its box of the tensor
    there.  None when the tensor's bytes are chunk after chunk (no chunk, or a split
    of dim 0 only: read in order, nothing to assemble), when a chunk row exceeds a
    slot, or for a slice along another dim (read_slice reads only its runs)."""
    shape = it.info.shape
    if len(shape) < 2 or not it.len or it.slice:
        return None
    boxes = ld.chunks(it.info.index)
    if len(boxes) < 2 or all(tuple(s[1:]) == shape[1:] for _, s in boxes):
        return None
    esz = it.info.nbytes // math.prod(shape)
    pieces = []
    for c, (o, s) in enumerate(boxes):
        a, b = max(o[0], it.r0), min(o[0] + s[0], it.r1)
        row = math.prod(s[1:]) * esz
        if a >= b or not row:
            continue
        if row > slot_bytes:
            return None
        rest = tuple(slice(o[d], o[d] + s[d]) for d in range(1, len(shape)))
        per = slot_bytes // row
        for x in range(a, b, per):
            y = min(b, x + per)
            n = (y - x) * row
            pieces.append(_Piece(k, n, req=(it.info.index, (x - o[0]) * row, n, c + 1),
                                 box=(slice(x - it.r0, y - it.r0),) + rest,
                                 shape=(y - x,) + tuple(s[1:])))
    return pieces


class _Ring:
    """Another device: the loader fills a ring of host buffers (pinned for CUDA)
    while the previous ones are copied to the device (non_blocking, each slot's on a
    stream of its own); a buffer is refilled only after its copies are done.

    A piece is placed where it belongs in the destination tensor, on the device: a
    tensor split along another dim than the first (tensor parallel's Shard(1), a 2-D
    grid) travels chunk by chunk, each copied into its box (the gather runs there;
    on_device=False: on the host, in order), and a cast to @dtype is the copy's own
    (torch's non_blocking copy from pinned memory moves the stored dtype and converts
    on the device, into the destination: a bf16 checkpoint crosses PCIe as bf16 and no
    whole-tensor copy of the stored dtype is ever made)."""

    def __init__(self, ld, plan, device, dtype=None, slot_bytes=None, nslots=None,
                 on_device=None):
        import torch
        self.torch, self.ld, self.plan = torch, ld, plan
        self.cuda = device.type == "cuda"
        self.on_device = self.cuda if on_device is None else on_device
        self.stored = [_torch_dtype(it.info.dtype) for it in plan]
        self.outs = [torch.empty(it.shape, device=device, dtype=dtype
                                 if dtype is not None and st.is_floating_point else st)
                     for it, st in zip(plan, self.stored)]
        total = sum(it.len for it in plan)
        slot = min(slot_bytes or SLOT_BYTES, total + _ALIGN * len(plan))
        self.slot_bytes = max(_ALIGN, -(-slot // _ALIGN) * _ALIGN)  # whole elements
        n = min(nslots or NSLOTS, max(1, math.ceil(total / self.slot_bytes)))
        self.slots = [torch.empty(self.slot_bytes, dtype=torch.uint8, pin_memory=self.cuda)
                      for _ in range(n)]
        self.streams = [torch.cuda.Stream(device) for _ in self.slots] if self.cuda else None
        for st in self.streams or ():
            st.wait_stream(torch.cuda.current_stream(device))
        self.done = [None] * n
        self.k, self.used, self.fill = 0, 0, []

    def run(self):
        for k, it in enumerate(self.plan):
            boxes = _box_pieces(self.ld, k, it, self.slot_bytes) if self.on_device else None
            for piece in boxes if boxes is not None else _tensor_pieces(k, it,
                                                                         self.slot_bytes):
                self.add(piece)
        self.flush()
        for st in self.streams or ():
            st.synchronize()
        return self.outs

    def add(self, piece):
        """Queue @piece: bytes in order fill the slot's room and go on in the next
        slot; a chunk's rows and a slice's runs go whole."""
        while piece is not None:
            room = self.slot_bytes - self.used
            if room <= 0 or (room < piece.n and not piece.splittable):
                self.flush()
                continue
            head, piece = piece.split(room) if room < piece.n else (piece, None)
            self.fill.append((head, self.used))
            self.used += -(-head.n // _ALIGN) * _ALIGN

    def place(self, buf, at, p):
        """Copy piece @p from the slot (at @at) into its place in its tensor."""
        src = buf[at:at + p.n].view(self.stored[p.k])
        if p.box is None:  # bytes of the tensor, in order
            e0 = p.dst // src.element_size()
            dst = self.outs[p.k].view(-1)[e0:e0 + src.numel()]
        else:  # a chunk's rows, into their box
            dst, src = self.outs[p.k][p.box], src.view(p.shape)
        dst.copy_(src, non_blocking=self.cuda)

    def flush(self):
        k, fill = self.k, self.fill
        if not fill:
            return
        buf = self.slots[k]
        self.ld.read_many([p.req[:3] + (buf.data_ptr() + at,) + p.req[3:]
                           for p, at in fill if p.req is not None])
        for p, at in fill:
            if p.slice is not None:
                self.ld.read_slice(*p.slice, buf.data_ptr() + at, p.n)
        torch = self.torch
        with torch.cuda.stream(self.streams[k]) if self.cuda else contextlib.nullcontext():
            for p, at in fill:
                self.place(buf, at, p)
            if self.cuda:
                self.done[k] = torch.cuda.Event()
                self.done[k].record(self.streams[k])
        self.k, self.used, self.fill = (k + 1) % len(self.slots), 0, []
        if self.done[self.k] is not None:
            self.done[self.k].synchronize()  # its copies must be done before reuse


def _read_staged(ld, plan, device, dtype=None, slot_bytes=None, nslots=None,
                 on_device=None):
    """The tensors of @plan on @device, through the staging ring (_Ring)."""
    return _Ring(ld, plan, device, dtype, slot_bytes, nslots, on_device).run()


def load(path, device="cpu", dtype=None, names=None, shard=None, *, options=None,
         threads=0, staged=None, hugepages=False, endpoint_url=None, region=None,
         profile=None, addressing=None, no_sign_request=False, cache_dir=None):
    """The state dict of PATH (a SOURCE or an unshardfs mount root) as {name: tensor}.

    PATH may be a remote SOURCE (s3://BUCKET/PREFIX, an https:// URL): endpoint_url,
    region, profile, addressing (auto, path, virtual), no_sign_request and cache_dir
    are the daemon's options of the same names (credentials: as the AWS tools find
    them). A mount of a remote SOURCE brings its own.

    device: where the tensors are made ("cpu", "cuda:0", ...). For a device other
        than the CPU the bytes travel as stored (a bf16 checkpoint crosses PCIe as
        bf16) through a bounded ring of pinned host buffers.
    dtype: a torch dtype to cast the floating tensors to (None: as served): on a
        device by each piece's copy into a tensor made in that dtype, on the host
        after the read.
    names: only these tensors (KeyError for a name the checkpoint does not have).
    shard: (rank, world) or (rank, world, dim): dim (default 0) of every tensor
        that has it is split as torch.chunk(t, world, dim)[rank] would split it, and
        only those bytes are read; tensors without that dim (0-dim ones, 1-D norm
        weights for dim=1) come whole.
    options: the mount's checkpoint options, spelled as the command line does
        (format, no_unwrap, strip_prefix, dtype, ties, deepspeed_weights,
        cache_size), e.g. {"dtype": "bf16", "strip_prefix": ["model."]}. With a
        mount root, leave them out (the mount's apply) or give exactly its own.
    threads: reader threads (0: one per CPU, at most 16).
    staged: force (True) or skip (False) the staging ring; None: only off the CPU.
    hugepages: back each host tensor of at least 2 MiB with transparent huge pages,
        faulted in by the reader threads before they read (not the staging ring's
        reused buffers). Filling fresh huge pages is about twice as fast where the
        machine backs them promptly, and slower where it does not (a VM whose host
        takes back freed 2 MiB blocks): docs/loader.md says how to tell.

    Tied names map to one tensor object, as from_pretrained gives them.
    """
    import torch
    dev = torch.device(device)
    use_ring = dev.type != "cpu" if staged is None else staged
    remote = dict(endpoint_url=endpoint_url, region=region, profile=profile,
                  addressing=addressing, no_sign_request=no_sign_request,
                  cache_dir=cache_dir)
    with Loader(path, options, threads, hugepages=hugepages and not use_ring,
                **remote) as ld:
        return _load(ld, dev, dtype, names, shard, use_ring)


def _load(ld, dev, dtype, names, shard, use_ring):
    """load()'s work on an opened Loader @ld."""
    plan = _plan(ld, names, shard)
    outs = _read_staged(ld, plan, dev, dtype) if use_ring else _read_direct(ld, plan)
    sd = {}
    for it, t in zip(plan, outs):
        if dtype is not None and t.is_floating_point() and t.dtype != dtype:
            t = t.to(dtype)
        for name in it.names:
            sd[name] = t
    return {name: sd[name] for name in sorted(sd)}


def _tie_groups(model):
    """Names of the model's state dict grouped by the tensor object they share."""
    groups = {}
    for name, t in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(t), []).append(name)
    return list(groups.values())


def _retie(model, full):
    """assign=True made one Parameter per name: names that got one tensor (a tie of
    the model or of the checkpoint) become one Parameter again."""
    params = dict(model.named_parameters(remove_duplicate=False))
    by_obj = {}
    for name, t in full.items():
        if name in params:
            by_obj.setdefault(id(t), []).append(name)
    for names in by_obj.values():
        first = model.get_parameter(names[0])
        for name in names[1:]:
            mod, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(mod), leaf, first)


def load_into(model, path, strict=True, *, device=None, options=None, threads=0):
    """Fill `model`'s parameters and buffers from PATH (a SOURCE or a mount root).

    A model whose tensors are on the meta device (built under init_empty()) gets
    the loaded tensors assigned, on `device` (default "cpu"), cast to each
    parameter's dtype; any other model is copied into in place (device: its own).
    Names the model ties share one tensor: one of them in the checkpoint is enough,
    as save_pretrained leaves the others out. strict: missing or unexpected names
    raise, as load_state_dict does. Returns load_state_dict's (missing, unexpected).
    """
    import torch
    msd = model.state_dict(keep_vars=True)
    meta = any(t.is_meta for t in msd.values())
    if device is None:
        device = "cpu" if meta or not msd else next(iter(msd.values())).device
    groups = _tie_groups(model)
    dev = torch.device(device)
    # One open: each runs us_source_open, tie confirmation's reads included.
    with Loader(path, options, threads) as ld:
        have = set(ld.index)
        # Each group is filled from the first of its names the checkpoint has.
        src_of = {}
        for g in groups:
            hit = next((n for n in g if n in have), None)
            if hit is not None:
                for n in g:
                    src_of[n] = hit
        sd = _load(ld, dev, None, sorted(set(src_of.values())), None,
                   dev.type != "cpu")
    full, cast = {}, {}
    for n, src in src_of.items():
        t = sd[src]
        target = msd[n]
        if meta and t.is_floating_point() and t.dtype != target.dtype:
            t = cast.setdefault(id(t), t.to(target.dtype))
        full[n] = t
    missing = [n for n in msd if n not in full]
    unexpected = sorted(have - set(msd))
    if strict and (missing or unexpected):
        raise RuntimeError(f"unshardfs.load_into: {path}: missing {missing[:5]}"
                           f"{'...' if len(missing) > 5 else ''}, unexpected "
                           f"{unexpected[:5]}{'...' if len(unexpected) > 5 else ''}")
    with torch.no_grad():
        res = model.load_state_dict(full, strict=False, assign=meta)
    if meta:
        _retie(model, full)
    return res._replace(unexpected_keys=unexpected) if hasattr(res, "_replace") else res


@contextlib.contextmanager
def init_empty():
    """Build a model whose parameters are on the meta device (no memory, no init)
    while its buffers stay real (rotary tables and other non-persistent buffers
    that no checkpoint holds), ready for load_into."""
    import torch
    register = torch.nn.Module.register_parameter

    def on_meta(module, name, param):
        register(module, name, param)
        if param is not None:
            p = module._parameters[name]
            kw = dict(p.__dict__)
            kw["requires_grad"] = p.requires_grad
            module._parameters[name] = type(p)(p.to("meta"), **kw)

    torch.nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register
