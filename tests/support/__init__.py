"""Helpers the tests share, as plain modules. Fixtures stay in the conftest files, which import from here;
no test module imports another test module or a conftest."""
