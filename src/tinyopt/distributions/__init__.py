"""``tinyopt.distributions``: probability distributions with ``torch.distributions``' API, for
the training scripts that sample (policy gradients, VAEs, stochastic layers)::

    from tinyopt.distributions import Categorical

    m = Categorical(logits=policy(state))
    action = m.sample()                    # drawn from tinyopt's generator (to.manual_seed)
    loss = -(m.log_prob(action) * advantage).sum() - 0.01 * m.entropy().sum()
    loss.backward()

``Categorical``, ``Normal`` and ``Bernoulli`` (``log_prob``, ``entropy``, ``sample``,
``rsample`` for Normal, ``cdf``, ``expand``, ``enumerate_support``, torch's validation errors) and
``kl_divergence`` between two of one kind.  Other torch distributions are not available: using
one raises an error naming the ones that are.
"""

from tinyopt.distributions import constraints
from tinyopt.distributions.bernoulli import Bernoulli
from tinyopt.distributions.categorical import Categorical
from tinyopt.distributions.distribution import Distribution
from tinyopt.distributions.kl import kl_divergence, register_kl
from tinyopt.distributions.normal import Normal

__all__ = ["Bernoulli", "Categorical", "Distribution", "Normal", "constraints", "kl_divergence",
           "register_kl"]


def __getattr__(name: str):
    if name[:1].isupper():
        raise AttributeError(f"tinyopt.distributions has no {name!r}: the distributions "
                             f"available are Bernoulli, Categorical and Normal")
    raise AttributeError(f"module 'tinyopt.distributions' has no attribute {name!r}")
