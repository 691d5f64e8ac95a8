"""Analysis of Nsight exports: loaders -> pure frame functions -> findings -> rendering.

Never imports torch or triton: it runs on any laptop over anyone's traces.
"""
