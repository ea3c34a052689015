"""The pretraining objective: one loss of :mod:`contrastive_jax.losses` or a
weighted sum of several (e.g. SimCLR + SupCon "JointTraining"), looked up by name in
the losses' registry (:func:`contrastive_jax.losses.get`).

Config (``config.loss``, every field declared in :class:`LossSpec`)::

    name = "sincere"              # or "nt_xent+supcon" for a sum
    weights = ()                  # one weight per term; empty = all 1.0
    temperature = None            # None: each loss's own default; a number: every term's
    warmup_temperature = None     # the temperature at step 0, annealed to each term's (None: off)
    temperature_warmup_steps = 0  # steps of that anneal (0: off)
    base_temperature = None       # None: unscaled; b: each term x (its temperature / b)
    view_reduction = "mean"       # "sum": each term V x its mean (SimCLR v1's loss_a + loss_b);
                                  # "first": each term on the first views alone
    kwargs = {}                   # per-term hyperparameters, e.g. {"projnce": {"beta": 1.0}}
    targets = {}                  # per-term second argument, e.g. {"mio": "instance"}
    mixing = {"num_classes": None, ...}  # MixUp/CutMix + label smoothing; None classes: off

``temperature`` goes to every term that takes one; a temperature in a term's ``kwargs``
wins over it; with neither, the loss's own default applies, the one its function declares
(e.g. :func:`contrastive_jax.losses.mio`'s 0.5): :func:`parse_terms` reads it there, once,
into the term's :attr:`Term.temperature`, and :func:`evaluate` passes that to the loss.

``base_temperature`` (None: off) multiplies each term that takes a temperature by
``temperature / base_temperature``, the term's temperature at that step: the loss scale of
the SupCon authors' code. Their PyTorch code (github.com/HobbitLong/SupContrast,
``losses.py``, ``loss = -(temperature / base_temperature) * mean_log_prob_pos`` with
``base_temperature = 0.07``) is ``base_temperature=0.07``; their TF code's
``--scale_by_temperature=True`` (google-research ``supcon/losses.py``: the loss times the
temperature) is ``base_temperature=1.0``. With SGD or LARS the scale changes the step size
(weight decay excepted) as a learning-rate factor would; it is a config field so that a
recipe states it.

``view_reduction`` says how a term reduces over its anchors (the V N rows of V views of N
examples): ``"mean"`` (the default) averages them; ``"sum"`` sums over views each view's mean
over its N anchors, V times the mean. The latter is SimCLR v1's loss (google-research/simclr
``objective.py``, ``add_contrastive_loss``: ``loss = loss_a + loss_b``, each a mean over the
anchors of one view): with LARS, whose trust ratio leaves out batch norm and biases, their
steps are twice as large as under the mean, and weight decay weighs half as much against the
gradient of the others. ``"first"`` computes each term on the N rows of the first views
alone (the other views still pass through the network, so its batch norm sees all V N): the
SupCon TF code's stage 2 (google-research/google-research@0c1bbe5 ``supcon/launcher.py``,
``_call_model``: both views stacked into the batch, then ``logits = tf.split(logits, 2,
axis=1)[0]`` for the cross-entropy). A two-tower term, which pairs the views, refuses it.

``warmup_temperature`` (with ``temperature_warmup_steps`` > 0) starts every term that
takes a temperature at that temperature and anneals it geometrically to the term's own
over the first steps (:meth:`Term.temperature_at`): at a low temperature, a spread of the
projections that is not yet organised by label costs more than putting every row on one
point, so training from a random initialisation first collapses the projections and
leaves that state after a number of steps that varies with the seed; starting at a high
temperature weakens that pull over the warm-up, though it can return once the temperature
is low (the quickstart's evidence: ``docs/collapse.md``).

Each loss is fed the second argument it is defined on, as the registry records it
(:func:`contrastive_jax.losses.second_argument`): instance ids for ``nt_xent``, class
labels for the supervised losses, metadata for the y-Aware family, nothing for
``global_uniformity``. ``config.loss.targets`` (optional) overrides it per term, e.g.
``{"mio": "instance"}`` for self-supervised MIO (the two views of an image as the
positive pair). Every registered loss whose second argument is one of :class:`Targets`
(or none) is a term: the embedding losses, ``align_uniform``, and the losses on class
scores with class labels (``label_cross_entropy``, ``label_soft_target_infonce``; the
``classifier`` head); the soft-target losses are not (the step has no soft targets but
the mixed ones below).

The two-tower losses (``clip``, ``siglip``; kind ``"paired_embeddings"``) treat the two
views of each example as its two towers: the projections of the first views are
``image_embeddings``, those of the second views ``text_embeddings`` (the step lays out
the V views of an example on consecutive rows; these losses need
``config.data.num_views = 2``). A shuffled-pairs control,
``config.loss.targets = {"clip": "shuffled_pairs"}``, pairs each example's first view
with the second view of the previous example on the device (a different, random
partner at every step), so the towers share no pairing to learn.

``config.loss.mixing`` (off while its ``num_classes`` is None, or set to None) turns on the soft targets of
Hugger & Uhlmann (2024, arXiv:2404.14076, Sec. 4.1, Eq. 2): label smoothing with MixUp or
CutMix in timm's batch mode (:mod:`contrastive_jax.train.mixing`). The training step then
mixes the flat rows of each device's batch before the network and feeds the label terms
the mixed, smoothed targets float [n, K] (``Targets.soft_label``) in place of the class
labels. Fields (:class:`Mixing`; their defaults are the paper's values)::

    mixing = {"num_classes": 10,  # K, the width of the class scores (required)
              "label_smoothing": 0.1, "mixup_alpha": 0.8, "cutmix_alpha": 1.0,
              "mixup_prob": 1.0, "switch_prob": 0.5}

Every term must then be a label term (the images of the batch are mixed, so a loss on
class labels or instance ids would see images that are not theirs), and the smoothing is
``mixing.label_smoothing``, not a term's ``label_smoothing``.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from contrastive_jax import losses
from contrastive_jax._sections import check_domains
from contrastive_jax.errors import ConfigError, check_fields

logger = logging.getLogger(__name__)

Array = jax.Array

class Mixing(NamedTuple):
    """The soft-target stage of ``config.loss.mixing`` (:func:`contrastive_jax.train.mixing.mix_batch`).

    Defaults are the paper's recipe (Hugger & Uhlmann 2024, Sec. 4.1; timm's batch mode).
    """

    num_classes: int  # K, the width of the class scores; None in a config: no mixing
    label_smoothing: float = 0.1  # epsilon of the smoothed targets
    mixup_alpha: float = 0.8  # Beta(alpha, alpha) of MixUp's lambda; 0: no MixUp
    cutmix_alpha: float = 1.0  # Beta(alpha, alpha) of CutMix's area; 0: no CutMix
    mixup_prob: float = 1.0  # probability that a batch is mixed at all
    switch_prob: float = 0.5  # probability of CutMix rather than MixUp when both are on


#: ``config.loss.view_reduction``: a term's mean over all anchors, the sum of its per-view
#: means (V x the mean), or its value on the first views' rows alone.
VIEW_REDUCTIONS = ("mean", "sum", "first")


@dataclasses.dataclass(frozen=True)
class LossSpec:
    """``config.loss``: every field of the objective and its default (the module docstring
    says what each does); :func:`parse_terms` turns it into the weighted terms."""

    name: str = "sincere"  # a loss of contrastive_jax.losses or a term of .terms; "a+b": a sum
    weights: tuple[float, ...] = ()  # one weight per term; empty: 1.0 each
    # None: each loss's own default (the loss function's); a number: every term's temperature.
    temperature: float | None = None
    # The temperature at step 0, annealed to each term's own; None: off.
    warmup_temperature: float | None = None
    temperature_warmup_steps: int = 0  # steps of the anneal from warmup_temperature; 0: off
    # None: unscaled; b: each term times its temperature / b (the SupCon code's loss scale:
    # HobbitLong/SupContrast b = 0.07, the TF code's scale_by_temperature b = 1).
    base_temperature: float | None = None
    # "mean": each term is its loss's mean over the V N anchors of the batch; "sum": the sum
    # over views of each view's mean over its N anchors, V x the mean (SimCLR v1's
    # loss_a + loss_b for V = 2); "first": the term on the N first views alone (every view
    # through the network: the SupCon TF code's stage 2).
    view_reduction: str = "mean"
    # Per-term hyperparameters by term name, e.g. {"projnce": {"beta": 1.0}}.
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Per-term second argument (a Targets field), e.g. {"mio": "instance"}.
    targets: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # The soft-target stage (Mixing); off while num_classes is None.
    mixing: Mapping[str, Any] | None = dataclasses.field(
        default_factory=lambda: {"num_classes": None, **Mixing._field_defaults})

    def __post_init__(self) -> None:
        steps, initial, base = (self.temperature_warmup_steps, self.warmup_temperature,
                                self.base_temperature)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ConfigError(
                f"config.loss.temperature_warmup_steps must be an int >= 0, got {steps!r}")
        if initial is None and steps > 0:
            raise ConfigError(
                "config.loss.temperature_warmup_steps > 0 needs config.loss.warmup_temperature "
                f"(the temperature at step 0); got {steps!r} steps and no temperature"
            )
        if initial is not None and steps > 0 and not float(initial) > 0:
            raise ConfigError(f"config.loss.warmup_temperature must be > 0, got {initial!r}")
        if base is not None and (isinstance(base, bool) or not isinstance(base, (int, float))
                                 or not base > 0):
            raise ConfigError(f"config.loss.base_temperature must be > 0 or None, got {base!r}")
        if self.view_reduction not in VIEW_REDUCTIONS:
            raise ConfigError(f"config.loss.view_reduction must be one of {VIEW_REDUCTIONS}, "
                              f"got {self.view_reduction!r}")
        check_domains(self, LOSS_DOMAINS, "config.loss")


#: The domain of each numeric field of :class:`LossSpec` (None: unset, where allowed).
LOSS_DOMAINS = {"temperature": "> 0", "warmup_temperature": "> 0",
                "temperature_warmup_steps": "int >= 0", "base_temperature": "> 0",
                "weights": "any"}


def loss_spec(fields: Any) -> LossSpec:
    """A :class:`LossSpec` of ``config.loss`` (a ``ConfigDict`` or a mapping of some fields; a
    :class:`LossSpec` is returned as it is).

    Raises:
      ConfigError: a field :class:`LossSpec` does not declare, naming the nearest one, or a
        bad value.
    """
    if isinstance(fields, LossSpec):
        return fields
    fields = dict(fields.items())
    check_fields("config.loss", fields, [f.name for f in dataclasses.fields(LossSpec)])
    return LossSpec(**fields)


class Term(NamedTuple):
    """One weighted term: ``fn(projections, <target>, temperature=..., **kwargs)``.

    ``temperature`` is the term's (None: its loss takes none), ``warmup_temperature`` its
    temperature at step 0, annealed to ``temperature`` over ``temperature_warmup_steps``
    (None: ``temperature`` throughout), ``mixing`` the batch stage that makes its soft
    targets (or None).
    """

    name: str
    weight: float
    target: str | None
    fn: Callable[..., Array]
    kwargs: Mapping[str, object]  # the loss's other hyperparameters
    temperature: float | None = None
    mixing: Mixing | None = None
    warmup_temperature: float | None = None
    temperature_warmup_steps: int = 0
    base_temperature: float | None = None  # the term is scaled by temperature / base_temperature
    views_summed: bool = False  # the term is V x its mean (config.loss.view_reduction="sum")
    first_view: bool = False  # the term on the first views' rows (view_reduction="first")

    def temperature_at(self, step: Array | None) -> Array | float | None:
        """The temperature at the 0-based ``step`` (needed with a warm-up; a traced int is
        fine): with a warm-up, float32 []
        ``warmup_temperature * (temperature / warmup_temperature) ** (min(step, S) / S)``,
        S the ``temperature_warmup_steps``."""
        if self.warmup_temperature is None or self.temperature is None:
            return self.temperature
        if step is None:
            raise ValueError(f"term {self.name!r} has a temperature warm-up: pass `step`")
        fraction = jnp.minimum(jnp.asarray(step, jnp.float32) / self.temperature_warmup_steps,
                               1.0)
        return self.warmup_temperature * (self.temperature / self.warmup_temperature) ** fraction


class Targets(NamedTuple):
    """Per-row second arguments of a flat multi-view batch (rows of this device)."""

    instance: Array  # int [n], global example index
    label: Array  # int [n]
    metadata: Array | None  # float [n, p]
    soft_label: Array | None = None  # float [n, K], the mixed targets under config.loss.mixing

#: Terms that take soft targets float [n, K] in place of class labels under
#: ``config.loss.mixing``: the losses on class scores with class labels.
SOFT_LABEL_TERMS = tuple(
    name for name in losses.names()
    if losses.first_argument(name) == "logits" and losses.second_argument(name) == "label"
)


def objective_terms() -> list[str]:
    """The registered losses ``config.loss.name`` can name, sorted: those whose second
    argument is a field of :class:`Targets`, the other tower or none."""
    return [
        name for name in losses.names()
        if losses.second_argument(name) in (None, "paired_embeddings", *Targets._fields)
    ]


#: The second arguments of a two-tower loss: the other view of the same example, or of the
#: previous example on the device (the shuffled-pairs control).
PAIRINGS = ("paired_embeddings", "shuffled_pairs")


def batch_mixing(terms: list[Term]) -> Mixing | None:
    """The one mixing stage of ``terms`` (None: no term mixes); raises if terms disagree."""
    stages = {t.mixing for t in terms}
    if len(stages) > 1:
        raise ConfigError(f"the terms {[t.name for t in terms]} ask for different mixing stages")
    return stages.pop() if stages else None


def parse_terms(loss: Any) -> list[Term]:
    """The weighted terms of ``config.loss`` (a :class:`LossSpec`, a ``ConfigDict`` or a
    mapping of some fields); raises ConfigError naming the field.

    Each term that takes a temperature gets one (:func:`_temperature`); ``targets``,
    ``mixing`` and the warm-up are checked against the terms' names.
    """
    spec = loss_spec(loss)
    names = _names(spec.name)
    weights = tuple(spec.weights or ()) or (1.0,) * len(names)
    if len(weights) != len(names):
        raise ConfigError(
            f"config.loss.weights has {len(weights)} entries for {len(names)} terms {names}")
    kwargs = _keyed_by_term("kwargs", spec.kwargs, names)
    overrides = _keyed_by_term("targets", spec.targets, names)
    mixing = _mixing(spec.mixing)
    _check_mixed_terms(mixing, names, kwargs, overrides)
    warmup_temperature = _warmup_start(spec)
    terms = []
    for name, weight in zip(names, weights, strict=True):
        own = dict(kwargs.get(name, {}))
        temperature = _temperature(name, own, spec.temperature)
        if spec.base_temperature is not None and temperature is None:
            raise ConfigError(
                f"config.loss.base_temperature scales a term by its temperature, but {name!r} "
                "takes none")
        terms.append(Term(
            name, float(weight), _target(name, overrides, mixing), losses.get(name), own,
            temperature, mixing, None if temperature is None else warmup_temperature,
            spec.temperature_warmup_steps,
            None if spec.base_temperature is None else float(spec.base_temperature),
            spec.view_reduction == "sum", spec.view_reduction == "first"))
        if terms[-1].first_view and terms[-1].target in PAIRINGS:
            raise ConfigError(
                f"config.loss.view_reduction='first' keeps the first views alone, but the "
                f"two-tower loss {name!r} pairs the two views of each example")
    if warmup_temperature is not None and not any(t.warmup_temperature for t in terms):
        raise ConfigError(
            f"config.loss.warmup_temperature is set, but no term of {names} takes a temperature")
    return terms


def _names(name: str) -> list[str]:
    """The terms of ``config.loss.name`` (``"a+b"``: two), each a loss the step can train on."""
    names = [n.strip() for n in str(name).split("+") if n.strip()]
    if not names:
        raise ConfigError("config.loss.name is empty; give a loss name such as 'sincere'")
    choices = objective_terms()
    for term in names:
        if term not in choices:
            raise ConfigError(
                f"config.loss.name: {term!r} is not a loss the objective can train on; "
                f"choose from {choices}"
            )
    return names


def _keyed_by_term(field: str, value: Mapping[str, Any] | None,
                   names: list[str]) -> dict[str, Any]:
    """``config.loss.<field>`` (kwargs or targets) as a dict whose keys are terms."""
    keyed = dict(value or {})
    unknown = set(keyed) - set(names)
    if unknown:
        raise ConfigError(
            f"config.loss.{field} names losses that are not terms: {sorted(unknown)}")
    return keyed


def _temperature(name: str, kwargs: dict[str, Any], temperature: float | None) -> float | None:
    """The temperature of the term ``name``, taken out of its ``kwargs``: the kwargs' own, else
    ``temperature`` (``config.loss.temperature``), else the loss's own default, defined in one
    place (its function's signature); None for a loss that takes none."""
    parameter = inspect.signature(losses.get(name)).parameters.get("temperature")
    if parameter is None:
        return None
    temperature = kwargs.pop("temperature", temperature)
    return float(parameter.default if temperature is None else temperature)


def _target(name: str, overrides: dict[str, str], mixing: Mixing | None) -> str | None:
    """The term's second argument: the registry's, ``config.loss.targets``', or the mixed
    soft targets under ``config.loss.mixing``."""
    target = losses.second_argument(name)
    if name in overrides:
        allowed = PAIRINGS if target == "paired_embeddings" else Targets._fields
        if overrides[name] not in allowed:
            raise ConfigError(
                f"config.loss.targets.{name}={overrides[name]!r} is not one of {allowed}")
        if target is None:
            raise ConfigError(f"config.loss.targets.{name}: {name!r} takes no second argument")
        target = overrides[name]
    return "soft_label" if mixing is not None else target


def _check_mixed_terms(mixing: Mixing | None, names: list[str], kwargs: dict[str, Any],
                       overrides: dict[str, str]) -> None:
    """Under ``config.loss.mixing`` every term takes the mixed soft targets, smoothed by the
    mixing stage alone."""
    if mixing is None:
        return
    other = [n for n in names if n not in SOFT_LABEL_TERMS]
    if other:
        raise ConfigError(
            f"config.loss.mixing mixes the images of the batch; the terms {other} do not "
            f"take soft targets (only {list(SOFT_LABEL_TERMS)} do)"
        )
    smoothed = [n for n in names if "label_smoothing" in dict(kwargs.get(n, {}))]
    if smoothed or overrides:
        raise ConfigError(
            f"with config.loss.mixing set, label smoothing is mixing.label_smoothing and the "
            f"targets are the mixed ones: remove config.loss.kwargs.<term>.label_smoothing "
            f"({smoothed}) and config.loss.targets ({sorted(overrides)})"
        )


def _warmup_start(spec: LossSpec) -> float | None:
    """The temperature at step 0 of the warm-up (None: off)."""
    if spec.warmup_temperature is not None and spec.temperature_warmup_steps == 0:
        # Off, with a word: the command line cannot set a float field to None, so steps=0 is
        # how a run turns off a config's warm-up (e.g. the quickstart's).
        logger.warning(
            "config.loss.temperature_warmup_steps is 0: no temperature warm-up, "
            "config.loss.warmup_temperature=%s is not used", spec.warmup_temperature)
        return None
    return None if spec.warmup_temperature is None else float(spec.warmup_temperature)


def _mixing(raw: Any) -> Mixing | None:
    """The stage of ``config.loss.mixing`` (None: off, as while its ``num_classes`` is None);
    raises ConfigError on bad fields."""
    if raw is None:
        return None
    fields = dict(raw.items()) if hasattr(raw, "items") else None
    if fields is None:
        raise ConfigError(f"config.loss.mixing must be a dict of fields or None, got {raw!r}")
    check_fields("config.loss.mixing", fields, Mixing._fields)
    fields = {**Mixing._field_defaults, "num_classes": None, **fields}
    if fields["num_classes"] is None:
        return None
    k = fields["num_classes"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ConfigError(
            f"config.loss.mixing.num_classes must be an int >= 2 (the width of the class "
            f"scores), got {k!r}"
        )
    mixing = Mixing(**{**fields, "num_classes": k})
    for name in ("label_smoothing", "mixup_prob", "switch_prob"):
        value = getattr(mixing, name)
        if not 0.0 <= float(value) <= 1.0:
            raise ConfigError(f"config.loss.mixing.{name} must be in [0, 1], got {value!r}")
    for name in ("mixup_alpha", "cutmix_alpha"):
        if float(getattr(mixing, name)) < 0.0:
            raise ConfigError(
                f"config.loss.mixing.{name} must be >= 0 (0 switches it off), got "
                f"{getattr(mixing, name)!r}"
            )
    return mixing._replace(
        label_smoothing=float(mixing.label_smoothing),
        mixup_alpha=float(mixing.mixup_alpha),
        cutmix_alpha=float(mixing.cutmix_alpha),
        mixup_prob=float(mixing.mixup_prob),
        switch_prob=float(mixing.switch_prob),
    )


def evaluate(
    terms: Sequence[Term],
    projections: Array,
    targets: Targets,
    *,
    axis_name: str | None,
    valid: Array | None = None,
    step: Array | None = None,
    num_views: int | None = None,
) -> tuple[Array, dict[str, Array]]:
    """Weighted sum of the terms on ``projections`` [n, d]; returns (total, {name: value}).

    A term with ``base_temperature`` is its loss times ``temperature / base_temperature`` (the value
    logged is the scaled one, as in the SupCon authors' code). A term with ``views_summed``
    (``config.loss.view_reduction="sum"``) is its loss times ``num_views`` (V, the views of
    an example): each view's mean over its anchors, summed over views, as SimCLR v1's
    ``loss_a + loss_b``; ``num_views`` is needed then. A term with ``first_view``
    (``view_reduction="first"``) sees rows ``0, V, 2V, ...`` of ``projections``, the
    targets and ``valid`` (the first view of each example: the step lays out the V views of
    an example on consecutive rows); ``num_views`` is needed then too.

    ``step`` (int [], 0-based) sets the temperature of the terms with a warm-up.
    """
    values = {}
    total = jnp.zeros((), jnp.float32)
    every_view = (projections, targets, valid)
    for term in terms:
        projections, targets, valid = every_view
        if term.first_view:
            if num_views is None:
                raise ValueError(f"term {term.name!r} keeps the first views: pass `num_views`")
            projections, valid = projections[::num_views], _first(valid, num_views)
            targets = Targets(targets.instance[::num_views], targets.label[::num_views],
                              _first(targets.metadata, num_views),
                              _first(targets.soft_label, num_views))
        temperature = term.temperature_at(step)
        kwargs = {**term.kwargs, **({} if temperature is None else {"temperature": temperature})}
        if term.target in PAIRINGS:
            value = _paired(term, projections, valid, axis_name, kwargs)
        elif term.target is None:
            value = term.fn(projections, axis_name=axis_name, valid=valid, **kwargs)
        else:
            second = getattr(targets, term.target)
            if second is None:
                what = {"metadata": "per-example metadata, but the dataset (config.data.dataset) "
                                    "has none",
                        "soft_label": "mixed soft targets, but the step made none "
                                      "(config.loss.mixing is off)"}.get(term.target, term.target)
                raise ConfigError(f"config.loss.name: loss {term.name!r} needs {what}")
            value = term.fn(projections, second, axis_name=axis_name, valid=valid, **kwargs)
        if term.base_temperature is not None and temperature is not None:  # parse: it is set
            value = value * (temperature / term.base_temperature)
        if term.views_summed:
            if num_views is None:
                raise ValueError(f"term {term.name!r} sums its per-view means: pass `num_views`")
            value = value * num_views
        values[term.name] = value
        total = total + term.weight * value
    return total, values


def _first(rows: Array | None, num_views: int) -> Array | None:
    """Rows ``0, V, 2V, ...``: each example's first view (None stays None)."""
    return None if rows is None else rows[::num_views]


def _paired(term: Term, projections: Array, valid: Array | None, axis_name,
            kwargs: Mapping[str, Any]) -> Array:
    """A two-tower term on the two views: rows 2i (first views) against rows 2i + 1."""
    n = projections.shape[0]
    if n % 2:
        raise ConfigError(
            f"loss {term.name!r} pairs the two views of each example, but the device has "
            f"{n} rows (an odd number): give the data two views per example"
        )
    images, texts = projections[0::2], projections[1::2]
    if term.target == "shuffled_pairs":
        texts = jnp.roll(texts, 1, axis=0)
    pair_valid = None if valid is None else valid[0::2] & valid[1::2]
    return term.fn(images, texts, axis_name=axis_name, valid=pair_valid, **kwargs)
