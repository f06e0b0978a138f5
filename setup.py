"""tff_ddp: distributed differential privacy with secure aggregation.

`pip install .` installs the framework-free core (tff_ddp.mechanisms,
.encoders, .accounting) on Python 3.11-3.13 with TensorFlow 2.14-2.21,
numpy 1.25 or 2.x and dp-accounting 0.4.3 or 0.6.0. `pip install '.[tff]'`
adds the TensorFlow Federated layer (aggregators, analytics, learning, the
CLI's federated commands), which needs TFF 0.87 on Python 3.11; TFF's pin
jaxlib==0.4.14 is no longer served, so install it with the override in
requirements/overrides.txt (README, "Install"). The exact pins of CI's two
lanes are requirements/lock.txt and requirements/lock-core.txt.
"""
import pathlib
import re

import setuptools

_VERSION = re.search(r"^__version__ = '([^']+)'",
                     (pathlib.Path(__file__).parent / 'tff_ddp' /
                      '__init__.py').read_text(), re.M).group(1)

setuptools.setup(
    name='tff_ddp',
    version=_VERSION,
    description=(
        'Distributed differential privacy (discrete Gaussian, Poisson binomial)'
        ' with secure aggregation, with accounting; TensorFlow Federated'
        ' aggregators and analytics.'),
    packages=setuptools.find_packages(include=['tff_ddp', 'tff_ddp.*']),
    python_requires='>=3.11,<3.14',
    install_requires=[
        'tensorflow>=2.14,<2.22',
        'numpy>=1.25,<3',
        'scipy>=1.9',
        'attrs>=22.1',
        # The versions whose internals tff_ddp reaches (the tight sampled
        # Gaussian; tff_ddp/accounting/dp_accounting_adapter.py) and tests.
        'dp-accounting>=0.4.3,!=0.4.4,!=0.5.*,<0.7',
    ],
    extras_require={
        'tff': [
            'tensorflow-federated==0.87.0',
            'tensorflow==2.14.1',
            'tensorflow-privacy==0.9.0',
            'dp-accounting==0.4.3',
            'numpy==1.25.2',
            'scipy==1.9.3',
            'tqdm==4.70.1',
        ],
    },
    entry_points={'console_scripts': ['tff-ddp=tff_ddp.cli:console_main']},
)
