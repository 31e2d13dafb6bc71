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

from ._lib import Loader, TensorInfo, UnshardfsError  # noqa: F401

__all__ = ["load", "load_into", "init_empty", "Loader", "UnshardfsError"]

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


def _rows(info, shard):
    """The dim and its indices [r0, r1) that rank `shard[0]` of `shard[1]` holds along
    dim `shard[2]` (default 0): torch.chunk's split (chunks of ceil(n / world), the
    last ones shorter or empty). No shard, or a tensor without that dim (a 0-dim one;
    a 1-D norm weight when dim is 1: replicated in tensor parallelism), is whole,
    as dim 0."""
    if shard is None:
        return 0, 0, info.shape[0] if info.shape else 1
    rank, world, dim = _shard_dim(shard)
    if dim >= len(info.shape):
        return 0, 0, info.shape[0] if info.shape else 1
    n = info.shape[dim]
    size = math.ceil(n / world) if n else 0
    r0 = min(n, rank * size)
    return dim, r0, min(n, r0 + size)


class _Item:
    """One tensor to read: the canonical of a tie group and the names it goes under.
    Sliced along dim 0 (or whole) it is the bytes [off, off + len) of the tensor; along
    another dim, .slice is (dim, r0, r1) and each of its .outer indices (those of the
    dims before) is one run of .run bytes, .stride apart in the tensor."""

    def __init__(self, info, names, shard):
        self.info = info
        self.names = names
        dim, r0, r1 = _rows(info, shard)
        self.r0, self.r1 = r0, r1
        self.slice = None
        if dim:
            self.slice = (dim, r0, r1)
            self.outer = math.prod(info.shape[:dim])
            inner = info.nbytes // (self.outer * info.shape[dim]) if info.nbytes else 0
            self.run, self.stride = (r1 - r0) * inner, info.shape[dim] * inner
            self.row = inner
            self.off, self.len = 0, self.outer * self.run
            self.shape = info.shape[:dim] + (r1 - r0,) + info.shape[dim + 1:]
            return
        n = info.shape[0] if info.shape else 1
        row = info.nbytes // n if n else 0
        self.off, self.len = r0 * row, (r1 - r0) * row
        self.shape = ((r1 - r0),) + info.shape[1:] if info.shape else ()


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


def _tensor_pieces(k, it, slot_bytes):
    """@it's bytes in order, in pieces of at most a slot: (request, length, place),
    where place is (plan index, destination byte offset) in the tensor.  A slice
    along another dim than the first goes a slot's worth of outer indices at a time
    (a request ("slice", ...): read_slice), or, when one run exceeds a slot, run by
    run (each contiguous in the tensor)."""
    if it.slice and it.run > slot_bytes:
        for o in range(it.outer):
            src = o * it.stride + it.slice[1] * it.row
            yield (it.info.index, src, it.run), it.run, (k, o * it.run)
        return
    if it.slice:
        per = max(1, slot_bytes // it.run) if it.run else it.outer
        for a in range(0, it.outer if it.run else 0, per):
            b = min(it.outer, a + per)
            yield ("slice", it.info.index) + it.slice + (a, b), (b - a) * it.run, \
                (k, a * it.run)
        return
    pos = 0
    while pos < it.len:
        n = min(slot_bytes, it.len - pos)
        yield (it.info.index, it.off + pos, n), n, (k, pos)
        pos += n


def _box_pieces(ld, k, it, slot_bytes):
    """@it assembled on the device: each source chunk read whole (its rows that
    @it wants), in pieces of whole rows, each placed into its box of the tensor
    there; place is (plan index, the box as slices, its shape).  None when the
    tensor's bytes are chunk after chunk (no chunk, or a split of dim 0 only: read
    in order, nothing to assemble) or a chunk row exceeds a slot."""
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
            pieces.append(((it.info.index, (x - o[0]) * row, (y - x) * row, c + 1),
                           (y - x) * row, (k, (slice(x - it.r0, y - it.r0),) + rest,
                                           (y - x,) + tuple(s[1:]))))
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
            pieces = boxes if boxes is not None else _tensor_pieces(k, it, self.slot_bytes)
            for req, n, where in pieces:
                self.add(req, n, where)
        self.flush()
        for st in self.streams or ():
            st.synchronize()
        return self.outs

    def add(self, req, n, where):
        """Queue a piece; one of the tensor's bytes in order fills the slot's room
        and goes on in the next, a chunk's rows and a slice's runs go whole."""
        while n:
            room = self.slot_bytes - self.used
            if room <= 0 or (room < n and (len(where) == 3 or req[0] == "slice")):
                self.flush()
                continue
            m = min(room, n)
            piece = req if m == n else (req[0], req[1], m) + req[3:]
            self.fill.append((piece, self.used, m, where))
            self.used += -(-m // _ALIGN) * _ALIGN
            if m < n:  # only bytes in order are split
                req, where = (req[0], req[1] + m, n - m) + req[3:], (where[0], where[1] + m)
            n -= m

    def place(self, buf, at, n, where):
        """Copy a piece from the slot into its place in its tensor."""
        k = where[0]
        src = buf[at:at + n].view(self.stored[k])
        if len(where) == 2:  # bytes of the tensor, in order
            e0 = where[1] // src.element_size()
            dst = self.outs[k].view(-1)[e0:e0 + src.numel()]
        else:  # a chunk's rows, into their box
            dst, src = self.outs[k][where[1]], src.view(where[2])
        dst.copy_(src, non_blocking=self.cuda)

    def flush(self):
        k, fill = self.k, self.fill
        if not fill:
            return
        buf = self.slots[k]
        self.ld.read_many([req[:3] + (buf.data_ptr() + at,) + req[3:]
                           for req, at, _n, _where in fill if req[0] != "slice"])
        for req, at, n, _where in fill:
            if req[0] == "slice":
                self.ld.read_slice(*req[1:], buf.data_ptr() + at, n)
        torch = self.torch
        with torch.cuda.stream(self.streams[k]) if self.cuda else contextlib.nullcontext():
            for _req, at, n, where in fill:
                self.place(buf, at, n, where)
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
    dtype: a torch dtype to cast the floating tensors to, on the device, after the
        copy (None: as served).
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
