"""SKMQ's TCP push protocol (see `codec`)."""
