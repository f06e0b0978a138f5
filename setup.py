"""tff_ddp: distributed differential privacy with secure aggregation for TFF."""
import setuptools

setuptools.setup(
    name='tff_ddp',
    version='0.1.0',
    description=(
        'Distributed differential privacy (discrete Gaussian, Poisson binomial)'
        ' with secure aggregation for TensorFlow Federated, with accounting.'
    ),
    packages=setuptools.find_packages(include=['tff_ddp', 'tff_ddp.*']),
    python_requires='>=3.11,<3.12',
    # Exact pins live in requirements/lock.txt (installed by `make setup`).
    install_requires=[
        'tensorflow-federated==0.87.0',
        'tensorflow==2.14.1',
        'tensorflow-privacy==0.9.0',
        'dp-accounting==0.4.3',
        'numpy==1.25.2',
        'scipy==1.9.3',
        'tqdm==4.70.1',
    ],
    entry_points={'console_scripts': ['tff-ddp=tff_ddp.cli:console_main']},
)
