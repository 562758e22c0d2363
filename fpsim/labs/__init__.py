"""Support for the Jupyter labs in ``labs/``: reference solutions to the exercises.

The notebooks hold no library logic; anything a lab needs twice lives in the package.
"""
