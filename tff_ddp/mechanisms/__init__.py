"""The mechanisms' math: one module per mechanism, behind one interface.

`base.Mechanism` is the interface; `distributed_discrete_gaussian`,
`distributed_skellam` and `poisson_binomial` implement it;
`sample_discrete_gaussian` and `poisson.sample_skellam` are the exact noise
samplers they use.
"""
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import distributed_discrete_gaussian
from tff_ddp.mechanisms import distributed_skellam
from tff_ddp.mechanisms import poisson_binomial
from tff_ddp.mechanisms.discrete_gaussian import sample_discrete_gaussian
