"""Input-pipeline throughput: the host's share, next to the train step, across formats.

    XLA_FLAGS= python experiments/bench/input_pipeline.py --host --workdir /tmp/bench_host
    XLA_FLAGS= python experiments/bench/input_pipeline.py --dataset folder:../shared/data/cifar10
    XLA_FLAGS= python experiments/bench/input_pipeline.py --dataset digits --batches 50
    XLA_FLAGS= python experiments/bench/input_pipeline.py --formats --workdir /tmp/bench_input
    XLA_FLAGS= python experiments/bench/input_pipeline.py --index_cost --workdir /tmp/bench_input
    XLA_FLAGS= python experiments/bench/input_pipeline.py --presets supcon_autoaugment \
        --workdir /tmp/bench_host

``--presets A,B`` mode: the host rate (as in ``--host``, same JPEG folder) for
``simclr_imagenet`` and each named augmentation preset, in one run (the host share of a
preset: its crop, resize and flip, and AutoAugment / RandAugment where it sets a policy).

``--host`` mode (the input path's host cost and the device's share): a folder of
``--examples`` synthetic JPEGs with ImageNet's size distribution (sides normal about
400 x 350 px, textured to about 110 KB at quality 90; the run prints the set's means),
SimCLR ImageNet augmentation, two 224 x 224 views, batches of ``--batch``, ``--batches``
batches timed after a warm-up one. The host decodes each JPEG once and crops, resizes and
flips both views (uint8); the appearance stages are the accelerator's and are not run here.
The rate is two-view images per CPU-second of this process (user + system time of all its
threads): the rate one host core sustains, comparable on a busy machine only roughly
(shared caches, frequency), so quote figures from quiet cores. Then a per-stage profile
(one thread, CPU time per image: read, decode, the two crops with their resize and flip),
and the device-side cost of the appearance stages as a fraction of the ResNet-50 training
step's FLOPs (XLA's cost analysis of both, per two-view example).

Default mode (pipeline against train step), measured in one process, one after the other
on the same cores:

* ``pipeline``: two-view augmented images per second of
  ``contrastive_jax.data.make_pretrain_iterator`` (the host's decoding and geometry, SimCLR
  CIFAR augmentation, batching), after a warm-up batch, over ``--batches`` batches of
  ``--batch`` images;
* ``train step``: images per second the jitted pretraining step consumes (default config:
  CIFAR-stem ResNet-18 + SimCLR-v2 head, SINCERE, LARS, on the same batches, finished on
  the device, already there), median over ``--steps`` steps.

``pipeline / train step`` > 1 means the pipeline is not the bottleneck. Both share this
machine's cores in a real run, so the ratio measured here, each stage alone, is an upper
bound on the headroom.

``--formats`` mode (storage formats side by side): the same synthetic JPEG images stored
three ways - a TFDS dataset in ArrayRecord files (written by
``contrastive_jax.data.prepare``), the same records in TFRecord files (TFDS's default
format, read directly: each shard indexed once, then one ranged read a record; the frames
written by tensorboardX's independent writer, the index built in the warm-up batch, from a
cache folder under ``--workdir``) and the image folder they were written from - read by
``make_pretrain_iterator`` (streamed: ``in_memory=False``) at two settings:

* 224: images of variable size (sides 200-500 px, about ImageNet's), SimCLR ImageNet
  augmentation, 224 x 224 views;
* 32: 32 x 32 images, SimCLR CIFAR augmentation.

Each rate is measured in a fresh process (an iterator's grain threads outlive it and would
slow the next measurement), the formats interleaved, ``--rounds`` processes each, the median
reported. For each it reports two-view images per second of wall time and per CPU-second of
the measuring process (user + system time of all its threads, from ``resource.getrusage``): the second is
the rate one host core sustains, and stays meaningful when other jobs share the cores. Then
the peak resident memory (``VmHWM``) of a fresh process that builds the source and draws
``--rss_batches`` batches, for the 32 px dataset at ``--rss_examples`` and 4x as many
examples: streaming means it does not grow with the dataset. Between the two, the raw read
rate of the two record formats alone (:func:`raw_read_rate`: the serialized records of the
224 px set, one row a call, no decoding).

``--index_cost`` mode (what indexing a TFRecord shard costs): a synthetic shard of
``--index_records`` records (1,251 by default, an ImageNet train shard's: 1,281,167 images
in 1,024 shards) of sizes normal about ``--index_kb`` KB (110, ImageNet's mean JPEG), then
the time to find its frame offsets (:func:`contrastive_jax.data.tfrecord.scan_offsets`)
from the page cache and with the file's pages dropped from it first
(``posix_fadvise(DONTNEED)``, as a shard not read since the machine started), for the
local reader's 4 KiB reads and for 12-byte reads of the headers alone; and the reads and
bytes the remote reader's 16 MiB pieces make of it (one request a piece, where reading the
headers alone would be one request a record).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

import jax
import numpy as np

from contrastive_jax import data
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import objective
from contrastive_jax.train.config import default_config
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import init_state, make_train_step


def pipeline_rate(config, batches: int) -> tuple[float, list[dict]]:
    """Two-view images/s of the pretraining iterator, and the batches it produced."""
    iterator = data.make_pretrain_iterator(config.data, seed=0, start_step=0)
    produced = [next(iterator)]  # warm-up: starts the threads, fills the prefetch buffer
    start = time.perf_counter()
    produced += [next(iterator) for _ in range(batches)]
    seconds = time.perf_counter() - start
    mesh = make_mesh()
    fields = ("views", "label", "index", "step")
    finished = [iterator.on_device(data.make_global_batch({k: b[k] for k in fields}, mesh))
                for b in produced]
    return batches * config.data.global_batch_size / seconds, finished


def train_step_rate(config, batches: list[dict], steps: int, num_classes: int) -> float:
    """Images/s of the jitted train step (median step time over ``steps`` steps)."""
    mesh = make_mesh()
    batch_size = config.data.global_batch_size
    spec = parse(config)
    graphdef, rest, tx, schedule, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=num_classes if spec.train.online_probe else None, transfer=spec.transfer,
        steps_per_epoch=100, global_batch_size=batch_size, total_steps=10**4)
    state = jax.device_put(state, replicated(mesh))
    step = make_train_step(graphdef, rest, tx, objective.parse_terms(config.loss), schedule, mesh)
    device_batches = batches[: steps + 1]  # finished on the devices by pipeline_rate
    state, logged = step(state, device_batches[0])  # compile
    jax.block_until_ready(logged)
    times = []
    for batch in device_batches[1:]:
        start = time.perf_counter()
        state, logged = step(state, batch)
        jax.block_until_ready(logged)
        times.append(time.perf_counter() - start)
    return batch_size / statistics.median(times)


# --------------------------------------------------------------------------- formats mode

FORMATS = ("array_record", "tfrecord", "folder")


def write_folder(root: str, count: int, size: int, seed: int = 0) -> str:
    """``count`` JPEGs in ``root/train/c{0..9}/``: smooth random images (upsampled noise,
    closer to a photograph's compressibility than white noise), quality 90.

    ``size`` 32: all 32 x 32; otherwise sides uniform in [200, 500].
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    for i in range(count):
        folder = os.path.join(root, "train", f"c{i % 10}")
        os.makedirs(folder, exist_ok=True)
        h, w = (32, 32) if size == 32 else (int(x) for x in rng.integers(200, 501, 2))
        coarse = rng.integers(0, 256, (max(2, h // 8), max(2, w // 8), 3), dtype=np.uint8)
        smooth = np.asarray(Image.fromarray(coarse).resize((w, h), Image.BICUBIC), np.float32)
        image = np.clip(smooth + rng.normal(0, 8, (h, w, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(image).save(os.path.join(folder, f"{i:06d}.jpg"), quality=90)
    return root


def write_tfrecord_copy(array_dir: str, tfrecord_dir: str) -> None:
    """The ArrayRecord TFDS datasets of ``array_dir`` rewritten in TFRecord files under
    ``tfrecord_dir``: each shard one for one, the same records in the same order (framed by
    tensorboardX's ``RecordWriter``, an implementation of the format independent of ours),
    the metadata copied with ``dataset_info.json`` naming the format."""
    from array_record.python.array_record_module import ArrayRecordReader
    from tensorboardX.record_writer import RecordWriter

    for folder, _, files in os.walk(array_dir):
        if "dataset_info.json" not in files:
            continue
        target = os.path.join(tfrecord_dir, os.path.relpath(folder, array_dir))
        os.makedirs(target, exist_ok=True)
        for entry in files:
            source = os.path.join(folder, entry)
            if ".array_record-" not in entry:
                shutil.copy2(source, os.path.join(target, entry))
                continue
            reader = ArrayRecordReader(source)
            writer = RecordWriter(os.path.join(target, entry.replace(".array_record-",
                                                                     ".tfrecord-")))
            for record in reader.read_all():
                writer.write(record)
            writer.close()
            reader.close()
        info_path = os.path.join(target, "dataset_info.json")
        with open(info_path, encoding="utf-8") as f:
            info = json.load(f)
        info["fileFormat"] = "tfrecord"
        info.pop("alternativeFileFormats", None)
        with open(info_path, "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2)


def build_datasets(workdir: str, count: int, size: int) -> dict[str, tuple[str, str | None]]:
    """The three stores of one synthetic dataset: format -> (config.dataset, config.data_dir)."""
    from contrastive_jax.data import prepare

    tag = f"s{size}_n{count}"
    root = os.path.join(workdir, tag)
    folder = os.path.join(root, "folder")
    array_dir = os.path.join(root, "array_record")
    tfrecord_dir = os.path.join(root, "tfrecord")
    name = f"bench_{tag}"
    if not os.path.isdir(os.path.join(array_dir, name)):
        shutil.rmtree(root, ignore_errors=True)
        write_folder(folder, count, size)
        prepare.from_image_folder(folder, name, array_dir)
    if not os.path.isdir(os.path.join(tfrecord_dir, name)):
        write_tfrecord_copy(array_dir, tfrecord_dir)
    return {"array_record": (name, array_dir), "tfrecord": (name, tfrecord_dir),
            "folder": (f"folder:{folder}", None)}


def format_config(dataset: str, data_dir: str | None, size: int, batch: int):
    config = data.default_data_config()
    config.dataset = dataset
    config.data_dir = data_dir
    config.image_size = size
    config.augmentation = "simclr_imagenet" if size > 32 else "simclr_cifar"
    config.global_batch_size = batch
    config.in_memory = False
    config.mean, config.std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)  # no statistics pass
    return config


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def format_rate(config, batches: int) -> tuple[float, float]:
    """(two-view images per wall second, per CPU-second) after a warm-up batch."""
    iterator = data.make_pretrain_iterator(config, seed=0, start_step=0)
    next(iterator)
    wall, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(batches):
        next(iterator)
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    images = batches * config.global_batch_size
    return images / wall, images / cpu


def raw_read_rate(dataset: str, data_dir: str, passes: int) -> tuple[float, float, float]:
    """(records per wall second, per CPU-second, MB per wall second) of reading the serialized
    records of the train split one row a call (as the host pipeline reads), in a seeded random
    order, ``passes`` times over, after one untimed pass (the index built, the files in the
    page cache); one thread, no decoding."""
    config = format_config(dataset, data_dir, 224, 64)
    records = data.load_source(config).split("train").records
    order = np.random.default_rng(0).permutation(records.num_examples).tolist()
    for row in order:
        records.read([row])
    wall, cpu, size = time.perf_counter(), cpu_seconds(), 0
    for _ in range(passes):
        for row in order:
            size += len(records.read([row])[0])
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    count = passes * len(order)
    return count / wall, count / cpu, size / wall / 1e6


def peak_rss(dataset: str, data_dir: str | None, batches: int, batch: int) -> float:
    """Peak RSS (MiB) of a fresh process that loads the source and draws ``batches`` batches."""
    probe = json.dumps([dataset, data_dir, batches, batch])
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--rss_probe", probe],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"memory probe {probe} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def probe_in_child(probe: list) -> list[float]:
    """The result of :func:`run_probe` in a fresh process: a measurement unperturbed by the
    threads an earlier iterator left running."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe", json.dumps(probe)],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"probe {probe} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_probe(probe: str) -> None:
    """The child of :func:`probe_in_child`: prints ``format_rate`` (``["rate", dataset,
    data_dir, size, batch, batches]``) or ``raw_read_rate`` (``["raw", dataset, data_dir,
    passes]``) as JSON."""
    kind, *rest = json.loads(probe)
    if kind == "rate":
        dataset, data_dir, size, batch, batches = rest
        print(json.dumps(format_rate(format_config(dataset, data_dir, size, batch), batches)))
    else:
        print(json.dumps(raw_read_rate(*rest)))


def rss_probe(probe: str) -> None:
    """The child of :func:`peak_rss`: prints its VmHWM in MiB."""
    dataset, data_dir, batches, batch = json.loads(probe)
    iterator = data.make_pretrain_iterator(format_config(dataset, data_dir, 32, batch), seed=0)
    for _ in range(batches):
        next(iterator)
    with open("/proc/self/status", encoding="utf-8") as f:
        hwm = next(line for line in f if line.startswith("VmHWM"))
    print(json.dumps(int(hwm.split()[1]) / 1024))


def compare_formats(args) -> None:
    from contrastive_jax.data import tfrecord

    os.environ[tfrecord.INDEX_DIR_VARIABLE] = os.path.join(args.workdir, "tfrecord_index")
    cores = len(os.sched_getaffinity(0))
    print(f"{cores} host cores, load average {os.getloadavg()[0]:.1f} at start")
    rows = []
    for size, count in ((224, args.examples_224), (32, args.examples_32)):
        stores = build_datasets(args.workdir, count, size)
        rates: dict[str, list[tuple[float, float]]] = {fmt: [] for fmt in FORMATS}
        for _ in range(args.rounds):  # the formats interleaved, each in a fresh process
            for fmt in FORMATS:
                rates[fmt].append(tuple(probe_in_child(
                    ["rate", *stores[fmt], size, args.batch, args.batches])))
        for fmt in FORMATS:
            wall = statistics.median(r[0] for r in rates[fmt])
            per_cpu = statistics.median(r[1] for r in rates[fmt])
            rows.append((size, fmt, wall, per_cpu))
            print(f"{size:>4} px  {fmt:<13} {wall:8.2f} images/s  {per_cpu:8.2f} images/CPU-s "
                  f"(per CPU-s of the {args.rounds} runs: "
                  f"{', '.join(f'{r[1]:.0f}' for r in rates[fmt])})", flush=True)
    print("\n| size | format | two-view images/s | images per CPU-second (one core) |"
          "\n|---|---|---|---|")
    for size, fmt, wall, per_cpu in rows:
        print(f"| {size} | {fmt} | {wall:.2f} | {per_cpu:.2f} |")
    stores = build_datasets(args.workdir, args.examples_224, 224)
    print(f"\nraw reads, {args.examples_224} records of the 224 px set, one row a call, "
          f"random order, {args.read_passes} passes, one thread, median of {args.rounds} "
          "processes:")
    print("| format | records/s | records per CPU-second | MB/s |\n|---|---|---|---|")
    raw: dict[str, list[list[float]]] = {"array_record": [], "tfrecord": []}
    for _ in range(args.rounds):
        for fmt in raw:
            raw[fmt].append(probe_in_child(["raw", *stores[fmt], args.read_passes]))
    for fmt, runs in raw.items():
        rate, per_cpu, megabytes = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"| {fmt} | {rate:.0f} | {per_cpu:.0f} | {megabytes:.0f} |", flush=True)
    print(f"\npeak RSS, 32 px, {args.rss_batches} batches of {args.batch}:")
    print("| format | examples | peak RSS MiB |\n|---|---|---|")
    for count in (args.rss_examples, 4 * args.rss_examples):
        stores = build_datasets(args.workdir, count, 32)
        for fmt in FORMATS:
            rss = peak_rss(*stores[fmt], args.rss_batches, args.batch)
            print(f"| {fmt} | {count} | {rss:.0f} |", flush=True)


# --------------------------------------------------------------------------- index cost


def write_shard(path: str, count: int, kb: float, seed: int = 0) -> list[int]:
    """A TFRecord file of ``count`` random records of sizes normal about ``kb`` KB (sd a
    quarter of it, at least 1 KB); returns the sizes."""
    import struct

    from contrastive_jax.data.tfrecord import masked_crc

    rng = np.random.default_rng(seed)
    sizes = np.maximum(1000, rng.normal(kb * 1000, kb * 250, count)).astype(int).tolist()
    block = rng.integers(0, 256, max(sizes), dtype=np.uint8).tobytes()
    with open(path, "wb") as f:
        for n in sizes:
            header = struct.pack("<Q", n)
            data = block[:n]
            f.write(header + struct.pack("<I", masked_crc(header)) + data
                    + struct.pack("<I", masked_crc(data)))
    return sizes


def _timed_scan(path: str, chunk: int, cold: bool) -> tuple[float, int]:
    """(seconds, reads) of one scan of ``path`` with ``chunk``-byte reads."""
    from contrastive_jax.data import tfrecord

    if cold:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    read, reads = tfrecord.local_reader(path), [0]

    def counted(offset: int, size: int) -> bytes:
        reads[0] += 1
        return read(offset, size)

    start = time.perf_counter()
    offsets = tfrecord.scan_offsets(counted, os.path.getsize(path), chunk)
    seconds = time.perf_counter() - start
    assert offsets[-1] == os.path.getsize(path)
    return seconds, reads[0]


def index_cost(args) -> None:
    from contrastive_jax.data import tfrecord

    os.makedirs(args.workdir, exist_ok=True)
    path = os.path.join(args.workdir, f"shard_{args.index_records}x{args.index_kb:g}kb.tfrecord")
    sizes = write_shard(path, args.index_records, args.index_kb)
    megabytes = os.path.getsize(path) / 1e6
    print(f"{len(os.sched_getaffinity(0))} host cores, load average {os.getloadavg()[0]:.1f}; "
          f"a shard of {len(sizes)} records, mean {np.mean(sizes) / 1000:.1f} KB, "
          f"{megabytes:.1f} MB")
    shards = args.index_shards
    print(f"\n| reads | page cache | seconds a shard (median of {args.index_repeats}) "
          f"| reads a shard | x {shards} shards, one thread |")
    print("|---|---|---|---|---|")
    for chunk in (tfrecord.LOCAL_CHUNK, tfrecord.HEADER_BYTES):
        for cold in (False, True):
            runs = [_timed_scan(path, chunk, cold) for _ in range(args.index_repeats)]
            seconds = statistics.median(r[0] for r in runs)
            print(f"| {chunk} B | {'dropped' if cold else 'warm'} | {seconds:.4f} | "
                  f"{runs[0][1]} | {seconds * shards:.1f} s |", flush=True)
    seconds, reads = _timed_scan(path, tfrecord.REMOTE_CHUNK, cold=False)
    print(f"\nremote reader ({tfrecord.REMOTE_CHUNK // 2**20} MiB pieces): {reads} reads a "
          f"shard, {megabytes:.1f} MB read ({seconds:.3f} s from the page cache); headers "
          f"alone: {len(sizes)} reads a shard. For {shards} shards: {reads * shards} requests "
          f"and {megabytes * shards / 1000:.0f} GB, or {len(sizes) * shards} requests.")


# --------------------------------------------------------------------------- host mode

#: ImageNet-like JPEGs: side means and spreads (px), JPEG quality.
IMAGENET_SIDES = ((350, 60), (400, 70))
JPEG_QUALITY = 90


def write_imagenet_like(root: str, count: int, seed: int = 0) -> str:
    """``count`` JPEGs in ``root/train/c{0..9}/`` of ImageNet's size distribution:
    sides ``N(350, 60) x N(400, 70)`` px clipped to [120, 800], smooth colour fields
    plus luminance grain (about 110 KB at quality 90, as ImageNet's mean)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for i in range(count):
        folder = os.path.join(root, "train", f"c{i % 10}")
        os.makedirs(folder, exist_ok=True)
        h, w = (int(np.clip(rng.normal(m, sd), 120, 800)) for m, sd in IMAGENET_SIDES)
        coarse = Image.fromarray(rng.integers(0, 256, (max(2, h // 16), max(2, w // 16), 3),
                                              dtype=np.uint8)).resize((w, h), Image.BICUBIC)
        texture = rng.normal(0, 48, (h, w, 1))  # luminance grain: ~110 KB on average
        image = np.clip(np.asarray(coarse, np.float32) + texture, 0, 255).astype(np.uint8)
        Image.fromarray(image).save(os.path.join(folder, f"{i:06d}.jpg"), quality=JPEG_QUALITY)
    return root


def imagenet_like_folder(workdir: str, count: int) -> str:
    folder = os.path.join(workdir, f"imagenet_like_n{count}")
    if not os.path.isdir(os.path.join(folder, "train")):
        shutil.rmtree(folder, ignore_errors=True)
        write_imagenet_like(folder, count)
    return folder


def folder_summary(folder: str) -> tuple[float, float, float]:
    """(mean height, mean width, mean KB) of the folder's JPEGs."""
    from PIL import Image

    paths = [os.path.join(d, f) for d, _, files in os.walk(folder) for f in files]
    sizes = [Image.open(p).size for p in paths]
    return (float(np.mean([s[1] for s in sizes])), float(np.mean([s[0] for s in sizes])),
            float(np.mean([os.path.getsize(p) for p in paths])) / 1000)


def path_rate(config, batches: int) -> float:
    """Two-view images per CPU-second of the configured path, after a warm-up batch."""
    source = data.load_source(config)
    iterator = data.make_pretrain_iterator(config, seed=0, source=source)
    next(iterator)
    cpu = cpu_seconds()
    for _ in range(batches):
        next(iterator)
    return batches * config.global_batch_size / (cpu_seconds() - cpu)


def _cpu_ms(fn, items) -> float:
    """CPU milliseconds per item of ``fn`` over ``items`` (one thread)."""
    start = time.process_time()
    for item in items:
        fn(item)
    return 1000 * (time.process_time() - start) / len(items)


def host_profile(folder: str, count: int) -> list[tuple[str, float]]:
    """(stage, CPU ms per image) of the host's stages on ``count`` of the folder's JPEGs."""
    from contrastive_jax.data.augment_config import augmentation_preset
    from contrastive_jax.data.host_views import decode, view_rngs, views_of

    paths = sorted(os.path.join(d, f) for d, _, files in os.walk(folder) for f in files)[:count]
    cfg = augmentation_preset("simclr_imagenet", 224)
    encoded = [open(p, "rb").read() for p in paths]  # noqa: SIM115 - read once, closed by gc
    decoded = [decode(e, "bench") for e in encoded]
    rngs = [view_rngs(0, 0, i, 2) for i in range(count)]
    rows = [
        ("read file", _cpu_ms(lambda p: open(p, "rb").read(), paths)),  # noqa: SIM115
        ("decode (Pillow)", _cpu_ms(lambda e: decode(e, "bench"), encoded)),
        ("2 x crop + resize + flip", _cpu_ms(lambda i: views_of(decoded[i], rngs[i], cfg, 224),
                                             range(count))),
        ("grain host: decode + 2 views", _cpu_ms(
            lambda i: views_of(decode(encoded[i], "bench"), rngs[i], cfg, 224), range(count))),
    ]
    return rows


def device_fraction(batch: int = 8) -> tuple[float, float]:
    """(FLOPs of the device's appearance stages, of a ResNet-50 training step) per two-view
    example.

    The appearance stages of ``simclr_imagenet`` at 224 px (every stage traced, as a
    vmapped ``where`` computes both branches) and the ResNet-50 (ImageNet stem) forward
    pass from XLA's cost analysis of the lowered programs; the training step counted
    as 3 forward passes (forward + backward), two views per example.
    """
    from flax import nnx

    from contrastive_jax import models
    from contrastive_jax.data.augment_config import augmentation_preset
    from contrastive_jax.data.device_augment import make_device_augment

    augment = make_device_augment(augmentation_preset("simclr_imagenet", 224), seed=0,
                                  mean=(0.5,) * 3, std=(0.25,) * 3)
    views = jax.ShapeDtypeStruct((batch, 2, 224, 224, 3), np.uint8)
    ids = jax.ShapeDtypeStruct((batch,), np.int32)
    moved = augment.lower(views, ids, ids).cost_analysis()["flops"] / batch
    encoder = models.create_encoder({"name": "resnet50", "stem": "imagenet"}, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(encoder)

    def forward(state, x):
        return nnx.merge(graphdef, state)(x)

    images = jax.ShapeDtypeStruct((1, 224, 224, 3), np.float32)
    step = 3 * 2 * jax.jit(forward).lower(state, images).cost_analysis()["flops"]
    return moved, step


def host_cost(args) -> None:
    cores = len(os.sched_getaffinity(0))
    print(f"{cores} host cores, load average {os.getloadavg()[0]:.1f} at start "
          "(quote only figures from quiet cores)")
    folder = imagenet_like_folder(args.workdir, args.examples)
    h, w, kb = folder_summary(folder)
    print(f"{args.examples} JPEGs, mean {h:.0f} x {w:.0f} px, {kb:.0f} KB")
    config = format_config(f"folder:{folder}", None, 224, args.batch)
    config.augmentation = "simclr_imagenet"
    rate = path_rate(config, args.batches)
    print("\n| host (decode, crop, resize, flip) | two-view 224 px images per host CPU-second |")
    print(f"|---|---|\n| simclr_imagenet | {rate:.1f} |", flush=True)
    print(f"\nper-stage profile, one thread, {args.profile_images} images:")
    print("| stage | CPU ms per image |\n|---|---|")
    for stage, ms in host_profile(folder, args.profile_images):
        print(f"| {stage} | {ms:.2f} |")
    moved, step = device_fraction()
    print(f"\ndevice: the appearance stages {moved / 1e9:.3f} GFLOP per two-view example, "
          f"the ResNet-50 step {step / 1e9:.1f} GFLOP: {100 * moved / step:.2f} % of the step")


def compare_presets(args) -> None:
    print(f"{len(os.sched_getaffinity(0))} host cores, load average "
          f"{os.getloadavg()[0]:.1f} at start (quote only figures from quiet cores)")
    folder = imagenet_like_folder(args.workdir, args.examples)
    print("\n| preset | two-view 224 px images per host CPU-second |\n|---|---|")
    for preset in ("simclr_imagenet", *args.presets.split(",")):
        config = format_config(f"folder:{folder}", None, 224, args.batch)
        config.augmentation = preset
        print(f"| {preset} | {path_rate(config, args.batches):.1f} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", action="store_true",
                        help="the host's cost and the device's share (see the docstring)")
    parser.add_argument("--presets", default=None,
                        help="comma-separated augmentation presets: their grain host rates")
    parser.add_argument("--examples", type=int, default=256, help="--host: JPEGs written")
    parser.add_argument("--profile_images", type=int, default=48,
                        help="--host: images of the per-stage profile")
    parser.add_argument("--formats", action="store_true",
                        help="compare ArrayRecord, TFRecord and image folder (see the docstring)")
    parser.add_argument("--index_cost", action="store_true",
                        help="time the offset index of an ImageNet-sized TFRecord shard")
    parser.add_argument("--index_records", type=int, default=1251,
                        help="--index_cost: records in the shard")
    parser.add_argument("--index_kb", type=float, default=110.0,
                        help="--index_cost: mean record size, KB")
    parser.add_argument("--index_shards", type=int, default=1024,
                        help="--index_cost: shards of the split it extrapolates to")
    parser.add_argument("--index_repeats", type=int, default=5,
                        help="--index_cost: scans timed per setting")
    parser.add_argument("--workdir", default="/tmp/contrastive_jax_bench_input",
                        help="--formats: where the synthetic datasets are written (kept)")
    parser.add_argument("--examples_224", type=int, default=512, help="--formats: 224 px images")
    parser.add_argument("--examples_32", type=int, default=4096, help="--formats: 32 px images")
    parser.add_argument("--rss_examples", type=int, default=4096,
                        help="--formats: 1x dataset size of the memory comparison")
    parser.add_argument("--rss_batches", type=int, default=30, help="--formats: batches drawn")
    parser.add_argument("--read_passes", type=int, default=5,
                        help="--formats: timed passes of the raw reads")
    parser.add_argument("--rss_probe", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3,
                        help="--formats: fresh processes per format and setting (median)")
    parser.add_argument("--dataset", default="cifar10", help="data.dataset (default cifar10)")
    parser.add_argument("--batch", type=int, default=256, help="global batch (images)")
    parser.add_argument("--batches", type=int, default=20, help="pipeline batches timed")
    parser.add_argument("--steps", type=int, default=3, help="train steps timed")
    parser.add_argument("--width", type=float, default=1.0, help="ResNet-18 width multiplier")
    args = parser.parse_args()
    if args.rss_probe:
        rss_probe(args.rss_probe)
        return
    if args.probe:
        run_probe(args.probe)
        return
    if args.formats:
        compare_formats(args)
        return
    if args.index_cost:
        index_cost(args)
        return
    if args.host:
        host_cost(args)
        return
    if args.presets:
        compare_presets(args)
        return

    config = default_config()
    config.dataset = args.dataset
    config.batch_size = args.batch
    config.model.encoder.width = args.width
    source = data.load_source(config.data)
    images_per_s, batches = pipeline_rate(config, max(args.batches, args.steps))
    step_images_per_s = train_step_rate(config, batches, args.steps, source.num_classes)
    views = batches[0]["views"]
    print(f"dataset {source.name}, batch {args.batch}, views {views.shape[1:]} "
          f"{views.dtype}, {jax.device_count()} device(s)")
    print(f"pipeline:   {images_per_s:9.1f} two-view images/s")
    print(f"train step: {step_images_per_s:9.1f} images/s (ResNet-18 width {args.width})")
    print(f"ratio pipeline / train step: {images_per_s / step_images_per_s:.1f}")


if __name__ == "__main__":
    main()
