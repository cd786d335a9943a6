"""Binding writes beyond the plain `pods/binding`: a share pod's lock and annotation."""
