//! Shared test helpers for building stores and comparing them with a model.
