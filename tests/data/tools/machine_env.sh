#!/bin/bash
# Prints what produced a capture (GPU and driver, Nsight Systems, torch/triton/CUDA, CPU):
# the env.txt each capture script writes beside its export.
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version
python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda)"
lscpu | grep "Model name"; nproc
