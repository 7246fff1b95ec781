"""Views of an :class:`~attnviz.engine.attention.Attention`: one module per output kind."""
