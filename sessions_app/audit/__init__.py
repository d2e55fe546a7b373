"""The audit desk in the admin: the model requests and their usage (`admin`: list, filters,
exports, usage pages) and the charts those pages draw (`charts`). Its reads are selectors
(`selectors/audit.py`), like every door's."""
