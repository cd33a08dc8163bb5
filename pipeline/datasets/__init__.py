"""Versioned datasets: recipes, preprocessors, segments, versions, the reader."""
