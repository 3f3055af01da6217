"""What a network plugin needs to build a network for any role: the public helpers, documented API.

A network factory receives ``observation_spec``, ``action_spec`` and ``role`` (``"policy"``, ``"value"``,
``"q_value"``, ``"q_values"`` or ``"deterministic_policy"``; see :data:`ROLES`) and returns the TensorDict
module the role needs. Two ways to build one:

- the trunk only: any ``nn.Module`` from :func:`trunk_input_size` features (or one observation of shape
  :func:`observation_shape`) to :func:`output_size` features, then :func:`wrap` adds the head (a categorical
  or Gaussian distribution for a policy, a value, Q-values...);
- the hidden layers only: :func:`with_head` adds the output layer (sized for the role, orthogonally
  initialised), the head, and for ``q_value`` the action's features at the input; :func:`build_layers`
  makes hidden layers from recipe tables (``{type = "Linear", out = 64}``), sizes inferred.

The observation entry a network reads is :func:`observation_key`: one tensor, or, for a Dict observation, a
TensorDict of named entries (:func:`observation_entries`). :func:`image_encoder` builds the ``cnn`` network's
encoder (images as envs give them, and a Dict's other entries) for a network of your own: hand it to
:func:`with_head` or :func:`wrap` as ``encoder``. These names stay as they are across rlplug releases; the
modules behind them (``rlplug.core``) may move.

A role may ask for several outputs per value (:class:`Role`: a critic of 25 quantiles is ``Role("q_value",
outputs=25)``, still equal to ``"q_value"``); :func:`output_size` counts them, so a network sized by it serves
such roles unchanged, and :func:`outputs_of` reads the count.
"""

from rlplug.core.heads import (
                               HEAD_GAIN,
                               ROLES,
                               Role,
                               action_bounds,
                               action_size,
                               input_size,
                               is_discrete,
                               observation_entries,
                               observation_key,
                               observation_shape,
                               output_size,
                               outputs_of,
                               share_body,
                               trunk_input_size,
                               with_head,
                               wrap,
)
from rlplug.core.images import image_encoder
from rlplug.core.layers import HIDDEN_GAIN, LAYERS, build_layers, features, linear

__all__ = ["ROLES", "Role", "outputs_of", "HEAD_GAIN", "HIDDEN_GAIN", "LAYERS", "observation_key", "observation_shape",
           "input_size",
           "observation_entries", "image_encoder", "trunk_input_size", "action_size", "output_size", "is_discrete",
           "action_bounds", "wrap", "with_head", "build_layers", "features", "linear", "share_body"]
