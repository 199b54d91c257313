import torch

torch.set_num_threads(1)  # 2 shared cores: more threads oversubscribe next to server subprocesses
