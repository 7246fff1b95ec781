"""Views of an :class:`~attnviz.attention.Attention`: one module per output kind."""
