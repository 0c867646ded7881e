BEGIN TRANSACTION;
CREATE TABLE jobs (
	id INTEGER NOT NULL, 
	created DATETIME NOT NULL, 
	ended DATETIME, 
	command TEXT NOT NULL, 
	command_key TEXT NOT NULL, 
	launcher VARCHAR(32) NOT NULL, 
	world_size INTEGER, 
	hosts JSON, 
	exit_status INTEGER, 
	elapsed_ns BIGINT, 
	run_dir TEXT, 
	meta JSON, 
	PRIMARY KEY (id)
);
INSERT INTO "jobs" VALUES(1,'2026-11-23 06:29:39.121943','2026-11-23 06:29:39.164565','mpirun -np 2 ./ring','/usr/bin/orterun -np 2 ./ring','openmpi',2,'["node0"]',0,1000000000,'/tmp/run','{}');
INSERT INTO "jobs" VALUES(2,'2026-11-23 06:29:39.176079',NULL,'mpirun -np 2 ./ring','/usr/bin/orterun -np 2 ./ring','openmpi',2,'null',NULL,NULL,NULL,'{}');
CREATE TABLE link_samples (
	job INTEGER NOT NULL, 
	t_ns BIGINT NOT NULL, 
	device INTEGER NOT NULL, 
	link VARCHAR(32) NOT NULL, 
	tx_bytes BIGINT, 
	rx_bytes BIGINT, 
	FOREIGN KEY(job) REFERENCES jobs (id) ON DELETE CASCADE
);
CREATE TABLE mappings (
	id INTEGER NOT NULL, 
	job INTEGER, 
	created DATETIME NOT NULL, 
	command_key TEXT, 
	world_size INTEGER, 
	topology TEXT, 
	mapping JSON NOT NULL, 
	max_congestion_before FLOAT, 
	avg_congestion_before FLOAT, 
	max_congestion_after FLOAT, 
	avg_congestion_after FLOAT, 
	optimal BOOLEAN, 
	meta JSON, 
	PRIMARY KEY (id), 
	FOREIGN KEY(job) REFERENCES jobs (id) ON DELETE SET NULL
);
INSERT INTO "mappings" VALUES(1,1,'2026-11-23 06:29:39.197228','/usr/bin/orterun -np 2 ./ring',2,'dgx1-v100','{"format": "rankmap-mapping", "version": 1}',NULL,NULL,NULL,NULL,NULL,'{}');
CREATE TABLE op_stats (
	job INTEGER NOT NULL, 
	rank INTEGER NOT NULL, 
	source VARCHAR(8) NOT NULL, 
	operation VARCHAR(64) NOT NULL, 
	calls BIGINT NOT NULL, 
	ns BIGINT NOT NULL, 
	payload BIGINT, 
	histogram JSON, 
	FOREIGN KEY(job) REFERENCES jobs (id) ON DELETE CASCADE
);
INSERT INTO "op_stats" VALUES(1,0,'mpi','MPI_Send',10,5000,1000,'[0, 0, 10]');
INSERT INTO "op_stats" VALUES(1,1,'mpi','MPI_Send',10,5000,2000,'[0, 0, 10]');
CREATE TABLE rankmap_schema (
	version INTEGER NOT NULL, 
	PRIMARY KEY (version)
);
INSERT INTO "rankmap_schema" VALUES(1);
CREATE TABLE ranks (
	job INTEGER NOT NULL, 
	world_rank INTEGER NOT NULL, 
	source VARCHAR(8) NOT NULL, 
	host TEXT, 
	pid INTEGER, 
	start_ns BIGINT, 
	elapsed_ns BIGINT, 
	comm_ns BIGINT, 
	finalized BOOLEAN, 
	problems JSON, 
	PRIMARY KEY (job, world_rank, source), 
	FOREIGN KEY(job) REFERENCES jobs (id) ON DELETE CASCADE
);
INSERT INTO "ranks" VALUES(1,0,'mpi','node0',10,0,1000000000,5000,1,'[]');
INSERT INTO "ranks" VALUES(1,1,'mpi','node0',11,0,1000000000,5000,1,'[]');
CREATE TABLE timeline (
	job INTEGER NOT NULL, 
	source VARCHAR(8) NOT NULL, 
	src INTEGER NOT NULL, 
	dst INTEGER NOT NULL, 
	class VARCHAR(16) NOT NULL, 
	bucket INTEGER NOT NULL, 
	bytes BIGINT NOT NULL, 
	FOREIGN KEY(job) REFERENCES jobs (id) ON DELETE CASCADE
);
INSERT INTO "timeline" VALUES(1,'mpi',0,1,'p2p',0,600);
INSERT INTO "timeline" VALUES(1,'mpi',0,1,'p2p',1,400);
INSERT INTO "timeline" VALUES(1,'mpi',1,0,'p2p',0,1200);
INSERT INTO "timeline" VALUES(1,'mpi',1,0,'p2p',1,800);
CREATE TABLE traffic (
	job INTEGER NOT NULL, 
	source VARCHAR(8) NOT NULL, 
	src INTEGER NOT NULL, 
	dst INTEGER NOT NULL, 
	class VARCHAR(16) NOT NULL, 
	operation VARCHAR(64) NOT NULL, 
	mem VARCHAR(16) NOT NULL, 
	bytes BIGINT NOT NULL, 
	messages BIGINT NOT NULL, 
	reporter INTEGER NOT NULL, 
	FOREIGN KEY(job) REFERENCES jobs (id) ON DELETE CASCADE
);
INSERT INTO "traffic" VALUES(1,'mpi',0,1,'p2p','MPI_Send','host',1000,10,0);
INSERT INTO "traffic" VALUES(1,'mpi',1,0,'p2p','MPI_Send','host',2000,10,1);
CREATE INDEX ix_jobs_key ON jobs (command_key, world_size);
CREATE INDEX ix_traffic_job ON traffic (job, reporter, source);
CREATE INDEX ix_op_stats_job ON op_stats (job, rank, source);
CREATE INDEX ix_timeline_job ON timeline (job, src, source);
CREATE INDEX ix_link_samples_job ON link_samples (job, t_ns);
CREATE INDEX ix_mappings_key ON mappings (command_key, world_size);
COMMIT;
