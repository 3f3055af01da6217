"""Policy and value networks sized from the env's specs: an MLP, any stack of torch.nn layers, a convolutional
network for image (and image-plus-vector) observations, and recurrent (LSTM, GRU) actors and critics (the
on-policy family but IMPALA, SAC, DDPG, TD3).

All share one output-layer-and-head path (:func:`rlplug.core.heads.with_head`); the feedforward ones also the
continuous-head options ``log_std``, ``log_std_init`` and ``squash`` (see :mod:`rlplug.core.heads`). The
recurrent ones are described in :mod:`rlplug.core.recurrent`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from rlplug.plugins.limits import Limit
from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Check, Range

#: The options every built-in network shares (their meaning: rlplug.core.heads). Kept here, not imported from
#: rlplug.core.heads, so that loading the plugins does not load torch.
Init = Literal["orthogonal", "default"]
LogStd = Literal["state", "parameter"]
Squash = Literal["tanh", "none"]
Activation = Literal["tanh", "relu", "elu", "gelu", "silu"]

ACTIVATIONS = {"tanh": "Tanh", "relu": "ReLU", "elu": "ELU", "gelu": "GELU", "silu": "SiLU"}
#: The hidden layers of ``sequential`` when a recipe gives none: the same network as ``mlp``'s default. The
#: defaults of list parameters are lists (never mutated: the schema converts them to fresh ones), so that their
#: annotation stays ``list[...]``, the type ``rlplug show`` names.
DEFAULT_LAYERS: list[dict[str, Any]] = [{"type": "Linear", "out": 64}, {"type": "Tanh"}, {"type": "Linear", "out": 64},
                                        {"type": "Tanh"}]


def hidden_layers(sizes, activation: str) -> list[dict[str, Any]]:
    """Layer tables for hidden layers of ``sizes``, each followed by ``activation``."""
    return [table for size in sizes for table in ({"type": "Linear", "out": size}, {"type": ACTIVATIONS[activation]})]


def layers_problem(tables: list[dict[str, Any]]) -> str | None:
    from rlplug.core.layers import layers_problem as problem  # late: torch loads only when a recipe is checked

    return problem(tables)


def make_mlp(
    observation_spec,
    action_spec,
    role: str,
    #: sizes of the hidden layers
    hidden: list[Annotated[int, Range(ge=1)]] = [64, 64],  # noqa: B006 (the schema copies defaults)
    #: the activation after each hidden layer
    activation: Activation = "tanh",
    #: orthogonal initialisation (CleanRL / SB3 gains, zero biases), or torch's default
    init: Init = "orthogonal",
    #: continuous policies: 'parameter', one learned log-std for every state, or 'state', the network outputs it
    log_std: LogStd = "parameter",
    #: continuous policies: the initial log-std
    log_std_init: float = 0.0,
    #: continuous policies: 'tanh' squashes into the action bounds; 'none' is a plain Normal (the env must clip)
    squash: Squash = "tanh",
    device: str = "cpu",
):
    """An MLP trunk with the head its role needs (categorical or Gaussian policy, value)."""
    from rlplug.networks import observation_entries, observation_shape

    shape = tuple(observation_shape(observation_spec))
    if observation_entries(observation_spec) is not None or len(shape) != 1:
        _refuse_entries("mlp", observation_spec)
        from rlplug.errors import UserError

        raise UserError(f"mlp reads one-dimensional observations, and this env's have shape {shape}; use cnn for "
                        f"images, or flatten them where the env can (the gym env's flatten_observations = true)")
    return _network(hidden_layers(hidden, activation), observation_spec, action_spec, role, init=init, log_std=log_std,
                    log_std_init=log_std_init, squash=squash, device=device)


def make_sequential(
    observation_spec,
    action_spec,
    role: str,
    #: the hidden layers as tables: {type = "Linear", out = 64}, {type = "Tanh"}, ... (input sizes inferred;
    #: the output layer and head are added). Types: Linear (out, bias), ReLU, Tanh, ELU (alpha), GELU
    #: (approximate), SiLU, LeakyReLU (negative_slope), Sigmoid, LayerNorm (eps, elementwise_affine, bias),
    #: BatchNorm1d (eps, momentum, affine, track_running_stats; normalises the last dim over every batch dim),
    #: Dropout (p), Flatten, Identity
    layers: Annotated[list[dict[str, Any]], Check(layers_problem)] = DEFAULT_LAYERS,
    #: orthogonal initialisation (CleanRL / SB3 gains, zero biases), or torch's default
    init: Init = "orthogonal",
    #: continuous policies: 'parameter', one learned log-std for every state, or 'state', the network outputs it
    log_std: LogStd = "parameter",
    #: continuous policies: the initial log-std
    log_std_init: float = 0.0,
    #: continuous policies: 'tanh' squashes into the action bounds; 'none' is a plain Normal (the env must clip)
    squash: Squash = "tanh",
    device: str = "cpu",
):
    """Any stack of torch.nn layers from the recipe (sizes inferred), then the head its role needs."""
    _refuse_entries("sequential", observation_spec)
    return _network(layers, observation_spec, action_spec, role, init=init, log_std=log_std,
                    log_std_init=log_std_init, squash=squash, device=device)


def _network(layers, observation_spec, action_spec, role, *, init, log_std, log_std_init, squash, device):
    """Hidden layers from tables, sized from the observation; the output layer and head for ``role``."""
    from rlplug.networks import build_layers, features, observation_shape, with_head

    body, shape = build_layers(layers, observation_shape(observation_spec), init=init)
    return with_head(body, features(shape), role=role, observation_spec=observation_spec, action_spec=action_spec,
                     init=init, log_std=log_std, log_std_init=log_std_init, squash=squash, device=device)


def _refuse_entries(name: str, observation_spec) -> None:
    """A one-line error where the observation is a Dict of entries, which this network does not read."""
    from rlplug.networks import observation_entries

    entries = observation_entries(observation_spec)
    if entries is not None:
        from rlplug.errors import UserError

        dims = observation_spec.ndim
        shown = ", ".join(f"{key} {list(spec.shape[dims:])}" for key, spec in entries.items())
        raise UserError(f"{name} reads one observation tensor, and this env's observation is a Dict of entries "
                        f"({shown}); use cnn, which reads images and vectors together, or concatenate them where "
                        f"the env can (the gym env's flatten_observations = true)")


def make_cnn(
    observation_spec,
    action_spec,
    role: str,
    #: output channels of each convolution; unset: Nature DQN's [32, 64, 64] for images of 36 pixels or more
    #: a side (Atari's 84 x 84), else MinAtar's [16] (its 10 x 10 frames)
    channels: list[Annotated[int, Range(ge=1)]] | None = None,
    #: each convolution's square kernel size, one per channels entry; unset: [8, 4, 3] (Nature) or [3] (small),
    #: or 3 for each convolution where channels has another length
    kernels: list[Annotated[int, Range(ge=1)]] | None = None,
    #: each convolution's stride, one per channels entry; unset: [4, 2, 1] (Nature) or [1] (small), or 1 each
    strides: list[Annotated[int, Range(ge=1)]] | None = None,
    #: sizes of the hidden layers after the convolutions (a Dict's other entries join there); unset: [512]
    #: with the Nature encoder, [128] with the small one
    hidden: list[Annotated[int, Range(ge=1)]] | None = None,
    #: the activation after each convolution and hidden layer
    activation: Activation = "relu",
    #: orthogonal initialisation (CleanRL / SB3 gains, zero biases), or torch's default
    init: Init = "orthogonal",
    #: continuous policies: 'parameter', one learned log-std for every state, or 'state', the network outputs it
    log_std: LogStd = "parameter",
    #: continuous policies: the initial log-std
    log_std_init: float = 0.0,
    #: continuous policies: 'tanh' squashes into the action bounds; 'none' is a plain Normal (the env must clip)
    squash: Squash = "tanh",
    device: str = "cpu",
):
    """Convolutions over image observations, then hidden layers and the head its role needs.

    Every role (policy, value, q_values, q_value and deterministic_policy with Box actions); shared_body
    shares the convolutions too. Images are read as the env gives them: H x W x C uint8 (gymnasium), channels-first
    floats (TorchRL's ToTensorImage), grey H x W, stacked frames; scaled to [0, 1] and put channels first inside the
    network.
    With a Dict observation each image entry (2 or more dims) has its own convolutions and the other entries
    join their features before the hidden layers: one network for image-plus-vector observations.
    """
    from rlplug.core.images import image_encoder
    from rlplug.networks import build_layers, features, observation_key, with_head

    encoder, chosen = image_encoder(observation_spec, observation_key(observation_spec), channels=channels,
                                    kernels=kernels, strides=strides, hidden=hidden,
                                    activation=ACTIVATIONS[activation], init=init)
    # out_features: an int (ImageEncoder's, EntriesEncoder's), typed by nn.Module.__getattr__ as Tensor | Module
    width = encoder.out_features
    layers = hidden_layers(chosen.hidden, activation)
    body, shape = build_layers(layers, (width,), init=init)  # type: ignore[arg-type]  # int behind Module.__getattr__
    return with_head(body, features(shape), role=role, observation_spec=observation_spec, action_spec=action_spec,
                     init=init, log_std=log_std, log_std_init=log_std_init, squash=squash, device=device,
                     encoder=encoder)


def recurrent_factory(cell: Literal["lstm", "gru"]):
    """The factory of the ``cell`` network plugin: one signature (their recipe keys) for both cells."""
    label = cell.upper()

    def make(
        observation_spec,
        action_spec,
        role: str,
        #: features of the recurrent layer's hidden state
        hidden_size: Annotated[int, Range(ge=1)] = 64,
        #: stacked recurrent layers
        num_layers: Annotated[int, Range(ge=1), Limit(100, "every step runs through the layers one after "
                                                           "another: far more takes minutes to build and each step "
                                                           "as long (typical: 1 to 3)")] = 1,
        #: sizes of the head's hidden layers, after the recurrent layers
        hidden: list[Annotated[int, Range(ge=1)]] = [64],  # noqa: B006 (the schema copies defaults)
        #: the activation after each of the head's hidden layers
        activation: Activation = "relu",
        #: the head's initialisation: orthogonal (CleanRL / SB3 gains, zero biases; the actor's output layer
        #: at gain 0.01 keeps its first actions off the tanh's flat ends), or torch's default
        init: Init = "orthogonal",
        device: str = "cpu",
    ):
        from rlplug.core.recurrent import make_recurrent

        _refuse_entries(cell, observation_spec)
        return make_recurrent(cell, observation_spec=observation_spec, action_spec=action_spec, role=role,
                              hidden_size=hidden_size, num_layers=num_layers,
                              head_layers=hidden_layers(hidden, activation),
                              init=init, device=device)

    make.__name__ = make.__qualname__ = f"make_{cell}"
    make.__doc__ = (f"An {label} over the observations, then an MLP head: an actor or critic with memory (ppo, a2c, "
                    f"vpg, surrogate, ppo-kl, sac, ddpg, td3); the hidden state is carried across steps in the "
                    f"TensorDict and reset where episodes end.")
    return make


make_lstm = recurrent_factory("lstm")
make_gru = recurrent_factory("gru")


@hookimpl
def rlplug_register_networks(register):
    register("mlp", make_mlp)
    register("sequential", make_sequential)
    register("cnn", make_cnn)
    register("lstm", make_lstm)
    register("gru", make_gru)
