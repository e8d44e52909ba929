"""The claims, one module per paper, each with a tuple ``CLAIMS``; a new module here is found
without being listed anywhere (fedkd.report.claims.all_claims)."""
