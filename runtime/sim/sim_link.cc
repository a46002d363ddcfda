// TEMPORARY: written this session.
