"""Exchanges (what each technique spends and relieves, and when it pays off); search comes next."""
