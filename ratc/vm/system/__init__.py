"""The system VM: a discrete-event simulation of scheduled training steps on P x D clusters."""
