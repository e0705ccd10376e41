"""One module per family of rules. A rule is a pure function (LoadedModel, Context) -> Problems."""
