DROP TABLE cache_generations;
