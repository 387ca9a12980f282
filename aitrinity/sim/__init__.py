"""Discrete-event simulation of serving, training and edge systems priced by the cost model."""
